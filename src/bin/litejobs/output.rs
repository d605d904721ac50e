//! How results look: aligned tables for people, JSON for scripts. Every command writes
//! through these, to the writer it was given.

use std::io::{self, Write};

use serde::Serialize;

/// A table with a header row; columns are padded to their widest cell.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns named by `header`; a name ending in `>` is right-aligned (for numbers), the
    /// `>` is not printed.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header
                .iter()
                .map(|h| h.trim_end_matches('>').to_string())
                .collect(),
            right: header.iter().map(|h| h.ends_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are blank; newlines in cells are shown as spaces).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows
            .push(cells.into_iter().map(|c| one_line(&c)).collect());
    }

    /// Writes the header and rows; the last column is not padded.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let cols = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(width(cell));
            }
        }
        let empty = String::new();
        let line = |cells: &mut dyn Iterator<Item = &String>| -> String {
            let mut text = String::new();
            for (i, cell) in cells.enumerate().take(cols) {
                if i > 0 {
                    text.push_str("  ");
                }
                let pad = widths[i].saturating_sub(width(cell));
                if self.right[i] {
                    text.push_str(&" ".repeat(pad));
                    text.push_str(cell);
                } else {
                    text.push_str(cell);
                    if i + 1 < cols {
                        text.push_str(&" ".repeat(pad));
                    }
                }
            }
            text.trim_end().to_string()
        };
        writeln!(out, "{}", line(&mut self.header.iter()))?;
        for row in &self.rows {
            let mut cells = row.iter().chain(std::iter::repeat(&empty)).take(cols);
            writeln!(out, "{}", line(&mut cells))?;
        }
        Ok(())
    }
}

fn width(text: &str) -> usize {
    text.chars().count()
}

/// Newlines and tabs as spaces, so a cell or a summary stays on its line; other control
/// characters escaped (`\u{1b}`), so text another program wrote into the database cannot
/// drive the terminal.
pub fn one_line(text: &str) -> String {
    let mut line = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\r' | '\t' => line.push(' '),
            c if c.is_control() => line.extend(c.escape_default()),
            c => line.push(c),
        }
    }
    line
}

/// At most `max` characters on one line, with `…` when cut. Only the start of `text` is
/// read, so an error of megabytes costs what a short one does.
pub fn clip(text: &str, max: usize) -> String {
    // One character more than fits tells whether it must be cut; escaping only lengthens.
    let head = match text.char_indices().nth(max.saturating_add(1)) {
        Some((end, _)) => &text[..end],
        None => text,
    };
    let text = one_line(head);
    if width(&text) <= max {
        return text;
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// An optional value as text, `-` when absent.
pub fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Pretty JSON and a newline.
pub fn write_json(out: &mut dyn Write, value: &impl Serialize) -> io::Result<()> {
    // From keeps the kind of an I/O error (a closed pipe ends quietly in main).
    serde_json::to_writer_pretty(&mut *out, value).map_err(io::Error::from)?;
    writeln!(out)
}

/// A share as a percentage: `23%`, `0.4%`.
pub fn percent(rate: f64) -> String {
    let p = rate * 100.0;
    if p == 0.0 || p >= 10.0 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_pads_columns_and_right_aligns_numbers() {
        let mut t = Table::new(&["NAME", "COUNT>", "NOTE"]);
        t.row(vec!["a".into(), "5".into(), "first\nline".into()]);
        t.row(vec!["longer".into(), "12345".into()]);
        let mut out = Vec::new();
        t.write(&mut out).expect("writing to a Vec");
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(
            text,
            "NAME    COUNT  NOTE\n\
             a           5  first line\n\
             longer  12345\n"
        );
    }

    #[test]
    fn clip_cuts_on_characters() {
        assert_eq!(clip("héllo wörld", 5), "héll…");
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("a\nb", 10), "a b");
        assert_eq!(clip("\u{1b}[31mred", 6), "\\u{1b…");
        assert_eq!(clip(&"x".repeat(1 << 20), 4), "xxx…");
    }

    #[test]
    fn percents() {
        assert_eq!(percent(0.0), "0%");
        assert_eq!(percent(0.004), "0.4%");
        assert_eq!(percent(0.2345), "23%");
        assert_eq!(percent(1.0), "100%");
    }
}
