//! Which paths are proxied, and refusal of paths that try to leave their prefix.
//!
//! The upstream (or anything between) may decode percent-escapes and resolve dot
//! segments, so a path is judged on every decoding of it: if any of them holds a `.`
//! or `..` segment, a backslash or a NUL, it is refused before anything is forwarded.

use std::borrow::Cow;

use percent_encoding::percent_decode_str;

/// The proxied API prefixes (SPEC §3.1), each with the route label it has in logs and
/// metrics.
const PROXIED: [(&str, &str); 2] = [
    ("/vedic/v1/", "/vedic/v1/*"),
    ("/western/v1/", "/western/v1/*"),
];

fn proxied(path: &str) -> Option<&'static (&'static str, &'static str)> {
    PROXIED
        .iter()
        .find(|(p, _)| path.starts_with(p) || path == &p[..p.len() - 1])
}

/// The proxied prefix of a path, or `None` when it is not proxied. A prefix's root
/// without its trailing slash (`/vedic/v1`) belongs to it too.
pub fn prefix_of(path: &str) -> Option<&'static str> {
    proxied(path).map(|(prefix, _)| *prefix)
}

/// The route label of a proxied path (`/vedic/v1/*`), or `None` when it is not proxied.
pub fn route_label(path: &str) -> Option<&'static str> {
    proxied(path).map(|(_, label)| *label)
}

/// How many rounds of percent-decoding are examined.
const DECODE_ROUNDS: usize = 3;

/// Whether `path` stays inside its prefix on every decoding.
pub fn is_contained(path: &str) -> bool {
    // Without a dot there is no dot segment, without `%` nothing decodes: one scan.
    if !path
        .bytes()
        .any(|b| matches!(b, b'.' | b'%' | b'\\' | b'\0'))
    {
        return true;
    }
    let mut current = Cow::Borrowed(path);
    for _ in 0..=DECODE_ROUNDS {
        if has_escape_segments(&current) {
            return false;
        }
        let decoded = match percent_decode_str(&current).decode_utf8() {
            // Nothing to decode (no allocation either): the path is what it says.
            Ok(Cow::Borrowed(_)) => return true,
            Ok(Cow::Owned(d)) => d,
            // Bytes that are not UTF-8 cannot name a segment we forward.
            Err(_) => return false,
        };
        if decoded == *current {
            return true;
        }
        current = Cow::Owned(decoded);
    }
    // Still changing after several decodings: refuse rather than guess.
    false
}

/// A segment is judged by what precedes any `;` (servlet containers read `..;x` as `..`).
fn has_escape_segments(path: &str) -> bool {
    path.contains('\\')
        || path.contains('\0')
        || path.split('/').any(|segment| {
            let name = segment.split(';').next().unwrap_or_default();
            name == "." || name == ".."
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_paths_stay_inside() {
        assert!(is_contained("/vedic/v1/horoscope/daily"));
        assert!(is_contained("/western/v1/chart/natal.json"));
        assert!(is_contained("/vedic/v1/place/S%C3%A3o%20Paulo"));
    }

    #[test]
    fn dot_segments_in_any_spelling_are_refused() {
        for path in [
            "/vedic/v1/../admin",
            "/vedic/v1/./x",
            "/vedic/v1/%2e%2e/admin",
            "/vedic/v1/%2E%2E/admin",
            "/vedic/v1/.%2e/admin",
            "/vedic/v1/..%2fadmin",
            "/vedic/v1/..%2Fadmin",
            "/vedic/v1/%252e%252e/admin",
            "/vedic/v1/..%5cadmin",
            "/vedic/v1/..\\admin",
            "/vedic/v1/%00",
            "/vedic/v1/..;/admin",
            "/vedic/v1/.;x/y",
            "/vedic/v1/%2e%2e;jsessionid=1/admin",
        ] {
            assert!(!is_contained(path), "{path}");
        }
    }

    #[test]
    fn only_the_two_prefixes_are_proxied() {
        assert_eq!(prefix_of("/vedic/v1/x"), Some("/vedic/v1/"));
        assert_eq!(prefix_of("/western/v1/"), Some("/western/v1/"));
        assert_eq!(prefix_of("/vedic/v2/x"), None);
        assert_eq!(prefix_of("/vedic/v1"), Some("/vedic/v1/"));
        assert_eq!(prefix_of("/vedic/v10"), None);
        assert_eq!(prefix_of("/admin/v1/x"), None);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Segments a client might use to climb out, in many spellings, and harmless ones.
        fn segment() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => prop::sample::select(vec![
                    ".", "..", "%2e", "%2E", "%2e%2e", "%2E%2e", ".%2e", "%2e.", "%252e",
                    "%252e%252e", "%25252e%25252e", "%2525252e%2525252e", "..;x", "%2e%2e;a=b",
                    "..%2f", "..%2F", "%2f", "%252f", "%5c", "..%5c", "%255c", "\\", "%00",
                    "%2500", "%", "%2", "%25", "%zz", "%c3%a3", "%ff", "a", "b.json", "v1",
                    "vedic", "..a", "a..", "...", ";", "%3b",
                ])
                .prop_map(str::to_owned),
                1 => "[a-z0-9.%;\\\\]{0,8}",
            ]
        }

        fn path() -> impl Strategy<Value = (String, &'static str)> {
            (
                prop::sample::select(vec!["/vedic/v1/", "/western/v1/"]),
                prop::collection::vec(segment(), 0..8),
                prop::sample::select(vec!["/", "%2f", "%252f"]),
            )
                .prop_map(|(prefix, segments, separator)| {
                    (format!("{prefix}{}", segments.join(separator)), prefix)
                })
        }

        /// Whether `path`, read the way a lenient server might (backslashes as slashes,
        /// `;` parameters dropped, dot segments resolved), ends up outside `prefix`.
        fn escapes(path: &str, prefix: &str) -> bool {
            let normalised = path.replace('\\', "/");
            let Some(rest) = normalised.strip_prefix(prefix) else {
                return true;
            };
            let mut depth: i64 = 0;
            for segment in rest.split('/') {
                match segment.split(';').next().unwrap_or_default() {
                    ".." => depth -= 1,
                    "." | "" => {}
                    _ => depth += 1,
                }
                if depth < 0 {
                    return true;
                }
            }
            false
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2_000))]

            #[test]
            fn a_contained_path_never_decodes_to_one_that_escapes((path, prefix) in path()) {
                if !is_contained(&path) {
                    return Ok(());
                }
                let mut current = path.clone();
                for depth in 0..8 {
                    prop_assert!(!escapes(&current, prefix), "{path} escapes at depth {depth}: {current}");
                    prop_assert!(!current.contains('\0'), "{path} holds a NUL at depth {depth}");
                    current = percent_decode_str(&current).decode_utf8_lossy().into_owned();
                }
            }

            #[test]
            fn an_escaping_spelling_is_never_contained((path, prefix) in path()) {
                let mut current = path.clone();
                let mut escaping = false;
                for _ in 0..=DECODE_ROUNDS {
                    escaping |= escapes(&current, prefix);
                    current = percent_decode_str(&current).decode_utf8_lossy().into_owned();
                }
                if escaping {
                    prop_assert!(!is_contained(&path), "{path}");
                }
            }

            #[test]
            fn a_path_is_proxied_exactly_when_it_starts_with_a_prefix_segment_pair(
                path in "(/(vedic|western|v1|v10|x|%2f|)){0,4}/?",
            ) {
                let mut segments = path.split('/');
                let expected = segments.next() == Some("")
                    && matches!(segments.next(), Some("vedic" | "western"))
                    && segments.next() == Some("v1");
                prop_assert_eq!(prefix_of(&path).is_some(), expected, "{}", path);
                if let Some(prefix) = prefix_of(&path) {
                    prop_assert!(path.starts_with(prefix.trim_end_matches('/')));
                }
            }
        }
    }
}
