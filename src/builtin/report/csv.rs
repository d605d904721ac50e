//! A small RFC 4180 CSV writer for report results, written beside the target and renamed
//! into place so a downloader never sees half a file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// A CSV file being written; [`CsvFile::commit`] puts it in place.
pub(crate) struct CsvFile {
    out: BufWriter<File>,
    partial: PathBuf,
    target: PathBuf,
}

impl CsvFile {
    /// Starts `path` (creating its folder) with a header line.
    pub(crate) fn create(path: &Path, header: &[&str]) -> std::io::Result<CsvFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".partial");
        let partial = path.with_file_name(name);
        let mut file = CsvFile {
            out: BufWriter::new(File::create(&partial)?),
            partial,
            target: path.to_path_buf(),
        };
        if !header.is_empty() {
            let fields: Vec<Value> = header.iter().map(|h| Value::from(*h)).collect();
            file.write_fields(&fields)?;
        }
        Ok(file)
    }

    /// Writes one row: an array's elements, an object's values in `header` order, or a
    /// single value.
    pub(crate) fn write_row(&mut self, row: &Value, header: &[&str]) -> std::io::Result<()> {
        match row {
            Value::Array(fields) => self.write_fields(fields),
            Value::Object(map) => {
                let fields: Vec<Value> = header
                    .iter()
                    .map(|h| map.get(*h).cloned().unwrap_or(Value::Null))
                    .collect();
                self.write_fields(&fields)
            }
            other => self.write_fields(std::slice::from_ref(other)),
        }
    }

    fn write_fields(&mut self, fields: &[Value]) -> std::io::Result<()> {
        for (i, field) in fields.iter().enumerate() {
            if i > 0 {
                self.out.write_all(b",")?;
            }
            let text = match field {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            self.out.write_all(quote(&text).as_bytes())?;
        }
        self.out.write_all(b"\r\n")
    }

    /// Flushes, syncs and renames the file into place.
    pub(crate) fn commit(self) -> std::io::Result<()> {
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&self.partial, &self.target)
    }
}

/// A field as RFC 4180 wants it: quoted (with inner quotes doubled) when it holds a comma, a
/// quote, a line break, or leading or trailing spaces.
pub(crate) fn quote(field: &str) -> String {
    let needs =
        field.contains([',', '"', '\n', '\r']) || field.starts_with(' ') || field.ends_with(' ');
    if needs {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_quoted_only_when_needed() {
        assert_eq!(quote("plain"), "plain");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(quote("two\nlines"), "\"two\nlines\"");
        assert_eq!(quote(" padded"), "\" padded\"");
    }

    #[test]
    fn rows_are_written_in_order_and_the_file_appears_on_commit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("out").join("r.csv");
        let mut csv = CsvFile::create(&path, &["id", "name"]).expect("create");
        csv.write_row(&json!([1, "a,b"]), &["id", "name"])
            .expect("row");
        csv.write_row(&json!({"name": "c", "id": 2}), &["id", "name"])
            .expect("row");
        csv.write_row(&json!([3, null]), &["id", "name"])
            .expect("row");
        assert!(!path.exists(), "the file must not appear before commit");
        csv.commit().expect("commit");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text, "id,name\r\n1,\"a,b\"\r\n2,c\r\n3,\r\n");
    }
}
