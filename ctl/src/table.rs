//! Aligned plain-text tables for `ferrulectl`'s human output: a header row, columns
//! padded to their widest cell, numeric columns right-aligned.

use std::fmt;

/// Cells that stand for "no value"; they do not make a numeric column textual.
const PLACEHOLDERS: [&str; 1] = ["-"];

/// Space between columns.
const GAP: &str = "  ";

/// A table under construction. Rows shorter than the header are padded with empty
/// cells; a row longer than the header adds columns with empty headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers and no rows.
    pub fn new<I, S>(headers: I) -> Table
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Table {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn row<I, S>(&mut self, cells: I) -> &mut Table
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(cells.into_iter().map(Into::into).collect());
        self
    }

    /// Number of rows (the header not counted).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn columns(&self) -> usize {
        self.rows
            .iter()
            .map(Vec::len)
            .fold(self.headers.len(), usize::max)
    }

    fn cell(row: &[String], column: usize) -> &str {
        row.get(column).map_or("", String::as_str)
    }

    /// A column is numeric when it has at least one number and every other cell is
    /// empty or a placeholder.
    fn is_numeric(&self, column: usize) -> bool {
        let mut numbers = 0;
        for row in &self.rows {
            let cell = Self::cell(row, column).trim();
            if cell.is_empty() || PLACEHOLDERS.contains(&cell) {
                continue;
            }
            if !is_number(cell) {
                return false;
            }
            numbers += 1;
        }
        numbers > 0
    }
}

/// An optionally signed decimal: `12`, `-3`, `99.5`. Not `inf`, `NaN` or `1e3`, which
/// Rust's float parser would accept but which are not counters.
fn is_number(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (whole, fraction) = match digits.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (digits, None),
    };
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let fraction_ok = match fraction {
        Some(f) => !f.is_empty() && all_digits(f),
        None => true,
    };
    !whole.is_empty() && all_digits(whole) && fraction_ok
}

fn width(text: &str) -> usize {
    text.chars().count()
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let columns = self.columns();
        if columns == 0 {
            return Ok(());
        }
        let numeric: Vec<bool> = (0..columns).map(|c| self.is_numeric(c)).collect();
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .map(|row| width(Self::cell(row, c)))
                    .fold(width(Self::cell(&self.headers, c)), usize::max)
            })
            .collect();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            for c in 0..columns {
                if c > 0 {
                    line.push_str(GAP);
                }
                let cell = Self::cell(row, c);
                let pad = " ".repeat(widths[c] - width(cell));
                if numeric[c] {
                    line.push_str(&pad);
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&pad);
                }
            }
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_columns_are_right_aligned() {
        let mut t = Table::new(["NAME", "RX-PKTS", "ROLE"]);
        t.row(["uplink0", "1234567", "uplink"])
            .row(["pod-a", "5", "pod"]);
        assert_eq!(
            t.to_string(),
            "NAME     RX-PKTS  ROLE\n\
             uplink0  1234567  uplink\n\
             pod-a          5  pod\n"
        );
    }

    #[test]
    fn one_text_cell_makes_a_column_textual() {
        let mut t = Table::new(["A", "B"]);
        t.row(["10", "x"]).row(["abc", "y"]).row(["7", "z"]);
        assert_eq!(t.to_string(), "A    B\n10   x\nabc  y\n7    z\n");
    }

    #[test]
    fn empty_cells_and_placeholders_keep_a_column_numeric() {
        let mut t = Table::new(["PORT", "SPEED"]);
        t.row(["a", "25000"])
            .row(["b", "-"])
            .row(["c", ""])
            .row(["d", "12.5"]);
        assert_eq!(
            t.to_string(),
            "PORT  SPEED\na     25000\nb         -\nc\nd      12.5\n"
        );
    }

    #[test]
    fn column_of_placeholders_only_is_left_aligned() {
        let mut t = Table::new(["XCONNECT", "N"]);
        t.row(["-", "1"]).row(["", "22"]);
        assert_eq!(t.to_string(), "XCONNECT   N\n-          1\n          22\n");
    }

    #[test]
    fn ragged_rows_are_padded() {
        let mut t = Table::new(["A", "B"]);
        t.row(["x"]).row(["y", "z", "extra"]);
        assert_eq!(t.to_string(), "A  B\nx\ny  z  extra\n");
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn header_only_table() {
        let t = Table::new(["WORKER", "LCORE"]);
        assert!(t.is_empty());
        assert_eq!(t.to_string(), "WORKER  LCORE\n");
        assert_eq!(Table::default().to_string(), "");
    }

    #[test]
    fn width_counts_characters_not_bytes() {
        let mut t = Table::new(["NAME", "N"]);
        t.row(["véth", "1"]).row(["ab", "10"]);
        assert_eq!(t.to_string(), "NAME   N\nvéth   1\nab    10\n");
    }

    #[test]
    fn number_syntax() {
        for yes in ["0", "18446744073709551615", "-3", "+4", "99.5"] {
            assert!(is_number(yes), "{yes}");
        }
        for no in [
            "", "-", "1.", ".5", "inf", "NaN", "1e3", "0/1", "10G", "1,000",
        ] {
            assert!(!is_number(no), "{no}");
        }
    }
}
