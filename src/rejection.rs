//! Bodies, queries and forms the extractors refused, told in the product's words
//! (SPEC §21): the field named, what it must be, and no parser's or framework's text.
//!
//! axum words a refusal as `Failed to deserialize the JSON body into the target type:
//! email: invalid type: integer `5`, expected a string at line 1 column 10`; serde's part
//! after the framework's prefix has a small fixed vocabulary (missing, unknown, duplicate
//! field; invalid type, value, length), which [`field_problem`] rewrites. A message the
//! product wrote itself (a custom deserializer's) is kept as it is.

/// The message of a body, query or form field that did not deserialize: `text` is the
/// rejection's own text.
pub fn field_problem(text: &str) -> String {
    let text = after_prefix(text);
    let text = without_position(text);
    let (path, what) = split_path(text);
    if let Some(field) = quoted_after(what, "missing field ") {
        return format!("{} is required", joined(path, field));
    }
    if let Some(field) = quoted_after(what, "unknown field ") {
        let accepted = what
            .split_once("expected one of ")
            .map(|(_, list)| format!(" (the fields are {})", list.replace('`', "")))
            .unwrap_or_default();
        return format!(
            "{} is not a field of this request{accepted}",
            joined(path, field)
        );
    }
    if let Some(field) = quoted_after(what, "duplicate field ") {
        return format!("{} is given twice", joined(path, field));
    }
    let subject = if path.is_empty() { "the body" } else { path };
    for kind in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = what.strip_prefix(kind) {
            let expected = rest
                .split_once(", expected ")
                .map_or("something else", |(_, e)| e);
            return format!("{subject} must be {}", in_words(expected));
        }
    }
    if what.starts_with("invalid length") {
        return format!("{subject} has the wrong number of items");
    }
    // A message of the product's own deserializers.
    if path.is_empty() {
        what.to_owned()
    } else {
        format!("{path}: {what}")
    }
}

/// The message of a body that is not JSON at all: where it goes wrong.
pub fn syntax_problem(text: &str) -> String {
    match position(text) {
        Some((line, column)) => format!("it goes wrong at line {line}, column {column}"),
        None => "it cannot be read as JSON".to_owned(),
    }
}

/// What serde says it expected, in words a client reads.
fn in_words(expected: &str) -> String {
    let expected = expected.trim();
    let words = match expected {
        "a string" | "a borrowed string" => "text",
        "a boolean" => "true or false",
        "i8" | "i16" | "i32" | "i64" | "isize" | "an integer" => "a whole number",
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number of at least 0",
        "f32" | "f64" | "a number" => "a number",
        "a sequence" => "a list",
        "a map" => "an object",
        _ if expected.starts_with("struct ") || expected.starts_with("a map") => "an object",
        _ if expected.starts_with("variant identifier") || expected.starts_with("one of") => {
            return format!(
                "one of {}",
                expected
                    .rsplit_once("one of ")
                    .map_or(expected, |(_, l)| l)
                    .replace('`', "")
            );
        }
        _ => return expected.replace('`', ""),
    };
    words.to_owned()
}

/// The text after axum's own words, if it starts with them.
fn after_prefix(text: &str) -> &str {
    const PREFIXES: [&str; 3] = [
        "Failed to deserialize the JSON body into the target type: ",
        "Failed to deserialize query string: ",
        "Failed to deserialize form: ",
    ];
    PREFIXES
        .iter()
        .find_map(|p| text.strip_prefix(p))
        .unwrap_or(text)
}

/// `text` without serde_json's trailing ` at line N column M`.
fn without_position(text: &str) -> &str {
    match text.rfind(" at line ") {
        Some(at) if position(&text[at..]).is_some() => &text[..at],
        _ => text,
    }
}

/// The line and column serde_json names at the end of `text`.
fn position(text: &str) -> Option<(u64, u64)> {
    let (_, tail) = text.rsplit_once(" at line ")?;
    let (line, column) = tail.split_once(" column ")?;
    Some((line.trim().parse().ok()?, column.trim().parse().ok()?))
}

/// `path: what` split where serde_path_to_error put the path (none for the top level).
fn split_path(text: &str) -> (&str, &str) {
    match text.split_once(": ") {
        Some((path, what)) if !path.is_empty() && !path.contains([' ', '`']) => {
            (if path == "." { "" } else { path }, what)
        }
        _ => ("", text),
    }
}

/// The name between backquotes right after `lead` in `text`.
fn quoted_after<'a>(text: &'a str, lead: &str) -> Option<&'a str> {
    let rest = text.strip_prefix(lead)?.strip_prefix('`')?;
    rest.split_once('`').map(|(name, _)| name)
}

/// `field` under `path` (`plan.name`), or alone at the top level; a path that already
/// ends with the field (an unknown field's) is the field's whole name.
fn joined(path: &str, field: &str) -> String {
    if path == field || path.ends_with(&format!(".{field}")) {
        return path.to_owned();
    }
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_type_names_the_field_and_what_it_must_be() {
        assert_eq!(
            field_problem(
                "Failed to deserialize the JSON body into the target type: email: invalid type: integer `5`, expected a string at line 1 column 10"
            ),
            "email must be text"
        );
        assert_eq!(
            field_problem(
                "monthly_limit: invalid type: string \"x\", expected i64 at line 1 column 20"
            ),
            "monthly_limit must be a whole number"
        );
        assert_eq!(
            field_problem("calls: invalid value: integer `-1`, expected u32 at line 1 column 9"),
            "calls must be a whole number of at least 0"
        );
        assert_eq!(
            field_problem(
                "invalid type: sequence, expected struct SignupRequest at line 1 column 0"
            ),
            "the body must be an object"
        );
    }

    #[test]
    fn missing_unknown_and_duplicate_fields_are_named() {
        assert_eq!(
            field_problem(
                "Failed to deserialize the JSON body into the target type: missing field `password` at line 1 column 27"
            ),
            "password is required"
        );
        assert_eq!(
            field_problem(
                "unknown field `admin`, expected `email` or `password` at line 1 column 8"
            ),
            "admin is not a field of this request"
        );
        assert_eq!(
            field_problem("unknown field `x`, expected one of `plan`, `months` at line 1 column 4"),
            "x is not a field of this request (the fields are plan, months)"
        );
        assert_eq!(
            field_problem(
                "admin: unknown field `admin`, expected `email` or `password` at line 1 column 8"
            ),
            "admin is not a field of this request"
        );
        assert_eq!(
            field_problem("duplicate field `email` at line 1 column 30"),
            "email is given twice"
        );
    }

    #[test]
    fn the_products_own_messages_are_kept() {
        assert_eq!(
            field_problem("Failed to deserialize query string: month: month must be YYYY-MM"),
            "month: month must be YYYY-MM"
        );
        assert_eq!(
            field_problem("limit must be 1 to 200"),
            "limit must be 1 to 200"
        );
    }

    #[test]
    fn syntax_errors_say_where_the_body_goes_wrong() {
        assert_eq!(
            syntax_problem(
                "Failed to parse the request body as JSON: expected value at line 1 column 1"
            ),
            "it goes wrong at line 1, column 1"
        );
        assert_eq!(syntax_problem("EOF"), "it cannot be read as JSON");
    }
}
