//! Reading text columns, and the typed values (states, policies) stored as text.
//!
//! jobq's identifier columns are `ascii_bin` and MariaDB's JSON is `utf8mb4_bin`; the server marks
//! columns with a binary collation as binary, and sqlx then refuses to decode them as `String`. Every text
//! column is therefore read as bytes and checked to be UTF-8 here, in one place.

use std::str::FromStr;

use sqlx::Row;
use sqlx::mysql::MySqlRow;

use crate::error::Error;

/// A text column that must not be NULL, by name or by position.
pub(crate) fn text<I: Column>(row: &MySqlRow, col: I) -> Result<String, sqlx::Error> {
    let bytes: Vec<u8> = row.try_get(col)?;
    utf8(col, bytes)
}

/// A text column that may be NULL, by name or by position.
pub(crate) fn opt_text<I: Column>(row: &MySqlRow, col: I) -> Result<Option<String>, sqlx::Error> {
    let bytes: Option<Vec<u8>> = row.try_get(col)?;
    bytes.map(|b| utf8(col, b)).transpose()
}

/// A column's name or position, as [`text`] and [`opt_text`] take it.
pub(crate) trait Column: sqlx::ColumnIndex<MySqlRow> + std::fmt::Display + Copy {}

impl<I: sqlx::ColumnIndex<MySqlRow> + std::fmt::Display + Copy> Column for I {}

/// A text column holding one of a type's stored values (a state, a policy).
pub(crate) fn parsed<T: FromStr<Err = Error>>(row: &MySqlRow, col: &str) -> Result<T, sqlx::Error> {
    parse(col, &text(row, col)?)
}

/// [`parsed`] for a column that may be NULL.
pub(crate) fn opt_parsed<T: FromStr<Err = Error>>(
    row: &MySqlRow,
    col: &str,
) -> Result<Option<T>, sqlx::Error> {
    opt_text(row, col)?.map(|s| parse(col, &s)).transpose()
}

fn parse<T: FromStr<Err = Error>>(col: &str, s: &str) -> Result<T, sqlx::Error> {
    s.parse().map_err(|e: Error| sqlx::Error::ColumnDecode {
        index: col.to_string(),
        source: Box::new(e),
    })
}

/// `bytes` of column `col` as text, borrowed.
pub(crate) fn utf8_str(col: impl std::fmt::Display, bytes: &[u8]) -> Result<&str, sqlx::Error> {
    std::str::from_utf8(bytes).map_err(|e| not_text(col, e))
}

fn utf8(col: impl std::fmt::Display, bytes: Vec<u8>) -> Result<String, sqlx::Error> {
    String::from_utf8(bytes).map_err(|e| not_text(col, e))
}

/// The error of column `col` whose bytes are not UTF-8.
fn not_text(
    col: impl std::fmt::Display,
    e: impl std::error::Error + Send + Sync + 'static,
) -> sqlx::Error {
    sqlx::Error::ColumnDecode {
        index: col.to_string(),
        source: Box::new(e),
    }
}
