//! Shared pieces of the property tests that hold a documented pattern (`/openapi.json`)
//! to the handler's own rule, in the regex engine the fuzz suite validates with.

use proptest::prelude::*;

/// The pattern at `pointer` (a JSON pointer) of a schema or document, compiled.
///
/// # Panics
/// When there is no pattern there or it does not compile: the test is then wrong.
pub fn pattern_at(document: &serde_json::Value, pointer: &str) -> fancy_regex::Regex {
    let pattern = document
        .pointer(pointer)
        .and_then(serde_json::Value::as_str)
        .unwrap_or_else(|| panic!("no pattern at {pointer}"));
    fancy_regex::Regex::new(pattern).expect("the documented pattern compiles")
}

/// Whitespace of every kind Rust's `trim` knows, and two it does not.
pub fn space() -> impl Strategy<Value = char> {
    prop::sample::select(vec![
        ' ', '\t', '\n', '\r', '\u{b}', '\u{c}', '\u{85}', '\u{a0}', '\u{1680}', '\u{2000}',
        '\u{200a}', '\u{2028}', '\u{2029}', '\u{202f}', '\u{205f}', '\u{3000}', '\u{feff}',
        '\u{200b}',
    ])
}
