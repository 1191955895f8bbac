//! A measurement table built once and rendered twice: as aligned text and as JSON rows.
//! Each cell carries what the text shows and what the JSON holds (a [`Summary`] keeps its
//! spread there while the text shows its median); a cell may be for one of them only.
//!
//! [`Summary`]: crate::measure::Summary

use serde::Serialize;
use serde_json::{Map, Value};

/// A text column: its header, width and alignment.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// The header.
    pub header: &'static str,
    /// The width cells are padded to.
    pub width: usize,
    /// Right-aligned (numbers) or left-aligned (labels).
    pub right: bool,
}

impl Column {
    /// A left-aligned column.
    pub const fn left(header: &'static str, width: usize) -> Column {
        Column { header, width, right: false }
    }

    /// A right-aligned column.
    pub const fn right(header: &'static str, width: usize) -> Column {
        Column { header, width, right: true }
    }

    fn pad(&self, text: &str) -> String {
        if self.right {
            format!("{text:>w$}", w = self.width)
        } else {
            format!("{text:<w$}", w = self.width)
        }
    }
}

/// One cell: its JSON key and value (none: text only) and its text (none: JSON only).
#[derive(Debug, Clone)]
pub struct Cell {
    json: Option<(&'static str, Value)>,
    text: Option<String>,
}

impl Cell {
    /// Shown as `text`; in the JSON as `value` under `key`.
    pub fn new(key: &'static str, value: impl Serialize, text: impl Into<String>) -> Cell {
        Cell { json: Some((key, to_value(value))), text: Some(text.into()) }
    }

    /// A label: the same string in both.
    pub fn label(key: &'static str, text: impl Into<String>) -> Cell {
        let text = text.into();
        Cell { json: Some((key, Value::String(text.clone()))), text: Some(text) }
    }

    /// In the JSON only.
    pub fn json(key: &'static str, value: impl Serialize) -> Cell {
        Cell { json: Some((key, to_value(value))), text: None }
    }

    /// In the text only.
    pub fn text(text: impl Into<String>) -> Cell {
        Cell { json: None, text: Some(text.into()) }
    }
}

fn to_value(value: impl Serialize) -> Value {
    // Measurements are numbers, strings and summaries: they always serialize.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// Rows under columns.
#[derive(Debug, Clone)]
pub struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    /// A table with these text columns.
    pub fn new(columns: &[Column]) -> Table {
        Table { columns: columns.to_vec(), rows: Vec::new() }
    }

    /// Add a row: its text cells fill the columns in order.
    pub fn push(&mut self, row: Vec<Cell>) {
        self.rows.push(row);
    }

    /// The header line and one line per row, columns one space apart.
    pub fn text(&self) -> String {
        let line = |cells: Vec<String>| {
            let padded: Vec<String> = self.columns.iter().zip(&cells).map(|(c, t)| c.pad(t)).collect();
            format!("{}\n", padded.join(" ").trim_end())
        };
        let mut out = line(self.columns.iter().map(|c| c.header.to_owned()).collect());
        for row in &self.rows {
            out.push_str(&line(row.iter().filter_map(|c| c.text.clone()).collect()));
        }
        out
    }

    /// One JSON object per row that has JSON cells.
    pub fn json(&self) -> Value {
        let rows = self.rows.iter().filter_map(|row| {
            let object: Map<String, Value> =
                row.iter().filter_map(|c| c.json.clone()).map(|(k, v)| (k.to_owned(), v)).collect();
            (!object.is_empty()).then_some(Value::Object(object))
        });
        Value::Array(rows.collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{fmt, Summary};
    use serde_json::json;

    #[test]
    fn one_table_two_renderings() {
        let mut t = Table::new(&[Column::left("configuration", 14), Column::right("roundtrip", 12)]);
        let s = Summary::of(&[9000.0, 9500.0, 8900.0]);
        t.push(vec![
            Cell::label("configuration", "vPMU off"),
            Cell::new("roundtrip_ns", s, format!("{} ns", fmt(s.median))),
            Cell::json("reps", 3),
        ]);
        t.push(vec![Cell::label("configuration", "vPMU on"), Cell::text("n/a")]);
        assert_eq!(t.text(), "configuration     roundtrip\nvPMU off           9,000 ns\nvPMU on                 n/a\n");
        assert_eq!(
            t.json(),
            json!([{"configuration": "vPMU off", "reps": 3,
                    "roundtrip_ns": {"median": 9000.0, "min": 8900.0, "max": 9500.0, "n": 3}},
                   {"configuration": "vPMU on"}])
        );
        t.push(vec![Cell::text("text only")]);
        assert_eq!(t.json().as_array().unwrap().len(), 2, "no JSON row for a text-only row");
    }
}
