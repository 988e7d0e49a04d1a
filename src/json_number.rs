//! Integers in JSON request bodies, read as JSON Schema reads them: a number whose value
//! is whole is an integer however it is written (`5`, `5.0`, `5e2`); `1.5`, a string or
//! a boolean is not. The OpenAPI document declares these fields `integer`, so a client
//! that serialises every number as a float is not refused.

use std::fmt;

use serde::Deserializer;
use serde::de::{Error, Unexpected, Visitor};

/// Beyond 2^53 an `f64` no longer holds every whole number exactly.
const EXACT: f64 = 9_007_199_254_740_992.0;

struct Whole;

impl<'de> Visitor<'de> for Whole {
    type Value = i64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer")
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v).map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
    }

    fn visit_f64<E: Error>(self, v: f64) -> Result<i64, E> {
        if v.fract() == 0.0 && v.abs() <= EXACT {
            Ok(v as i64)
        } else {
            Err(E::invalid_value(Unexpected::Float(v), &self))
        }
    }
}

struct WholeOrNull;

impl<'de> Visitor<'de> for WholeOrNull {
    type Value = Option<i64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer or null")
    }

    fn visit_none<E: Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }

    fn visit_unit<E: Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<i64>, D::Error> {
        whole(d).map(Some)
    }
}

/// An integer field (`#[serde(deserialize_with = "crate::json_number::whole")]`).
pub fn whole<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    d.deserialize_any(Whole)
}

/// An integer field that may be null (with `#[serde(default)]` when it may be absent).
pub fn whole_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    d.deserialize_option(WholeOrNull)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Body {
        #[serde(deserialize_with = "super::whole")]
        n: i64,
        #[serde(default, deserialize_with = "super::whole_or_null")]
        m: Option<i64>,
    }

    fn read(json: &str) -> Result<(i64, Option<i64>), String> {
        serde_json::from_str::<Body>(json)
            .map(|b| (b.n, b.m))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn whole_numbers_are_integers_however_written() {
        assert_eq!(read(r#"{"n": 5}"#), Ok((5, None)));
        assert_eq!(read(r#"{"n": 77825.0, "m": 2e2}"#), Ok((77825, Some(200))));
        assert_eq!(read(r#"{"n": -3.0, "m": null}"#), Ok((-3, None)));
        assert_eq!(read(r#"{"n": 9223372036854775807}"#), Ok((i64::MAX, None)));
    }

    #[test]
    fn anything_else_is_refused_naming_what_is_expected() {
        for json in [
            r#"{"n": 1.5}"#,
            r#"{"n": "5"}"#,
            r#"{"n": true}"#,
            r#"{"n": null}"#,
            r#"{"n": 1e300}"#,
            r#"{"n": 9223372036854775808}"#,
            r#"{"n": 1, "m": 0.5}"#,
        ] {
            let error = read(json).expect_err(json);
            assert!(error.contains("an integer"), "{json}: {error}");
        }
    }
}
