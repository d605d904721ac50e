// Runs SQL in SQLite 3.31.1 (sql.js 1.2.2, SQLite compiled to JavaScript): the oldest SQLite
// the schema contract promises to work with. Reads a JSON scenario on stdin:
//   {"setup": [sql, ...], "cases": [sql, ...]}
// runs the setup statements (each must work), then each case on its own, and prints JSON:
//   {"version": "3.31.1", "cases": ["ok" | "error: MESSAGE", ...]}
const path = require('path');
const init = require(path.join(process.argv[2], 'package', 'dist', 'sql-asm.js'));
let input = '';
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', () => {
  const scenario = JSON.parse(input);
  init().then((SQL) => {
    const db = new SQL.Database();
    const version = db.exec('SELECT sqlite_version()')[0].values[0][0];
    for (const sql of scenario.setup) {
      db.run(sql);
    }
    const cases = scenario.cases.map((sql) => {
      try {
        db.run(sql);
        return 'ok';
      } catch (e) {
        return 'error: ' + e.message;
      }
    });
    process.stdout.write(JSON.stringify({ version, cases }));
  }).catch((e) => { console.error(e); process.exit(1); });
});
