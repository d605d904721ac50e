//! Command handlers and encrypted jobs: an `--exec` command reads the decrypted payload on its
//! stdin and a `--serve` process in its line; what either returns is stored encrypted.

use litejobs::exec::{Command, Serve};

use super::*;
use crate::support::{have_tool, write_script};

#[test]
fn commands_get_the_decrypted_payload_and_their_results_are_stored_encrypted() {
    if !have_tool("python3") {
        return;
    }
    let env = setup();
    let queue = with_keys(&env, K1);
    let exec = write_script(
        env.dir.path(),
        "exec.sh",
        "#!/bin/sh\nprintf '{\"got\": %s}\\n' \"$(cat)\"\n",
    );
    let serve = write_script(
        env.dir.path(),
        "serve.py",
        "#!/usr/bin/env python3\nimport json, sys\nfor line in sys.stdin:\n    job = json.loads(line)\n    print(json.dumps({\"id\": job[\"id\"], \"outcome\": \"ok\", \"result\": {\"got\": job[\"payload\"]}}), flush=True)\n",
    );
    let ids: Vec<i64> = ["by_exec", "by_serve"]
        .iter()
        .map(|t| {
            queue
                .enqueue(NewJob::new(*t, json!({"card": SECRET})).encrypted())
                .expect("enqueue")
        })
        .collect();
    let worker = Worker::builder(&queue)
        .handler("by_exec", Command::new(exec.to_string_lossy()))
        .handler("by_serve", Serve::new(serve.to_string_lossy()));
    assert_eq!(testing::drain(&worker).expect("drain").succeeded, 2);
    assert_eq!(stored_with(&env, SECRET), 0);
    for id in ids {
        let job = queue.job(id).expect("read").expect("exists");
        assert_eq!(
            job.result,
            Some(json!({"got": {"card": SECRET}})),
            "job {id}"
        );
    }
}
