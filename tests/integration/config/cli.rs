//! The binary's commands refuse a bad start in one line on stderr.

use super::{stderr_line, tollgate};

#[test]
fn serve_with_a_bad_configuration_exits_with_one_line() {
    let out = tollgate(&["serve"], &[("TOLLGATE__SERVER__NOPE", "1")]);
    assert!(!out.status.success());
    let err = stderr_line(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn serve_without_the_shared_secret_refuses_to_start() {
    let out = tollgate(&["serve"], &[]);
    assert!(!out.status.success());
    let err = stderr_line(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("shared_secret"), "{err}");
}

#[test]
fn migrate_against_an_unreachable_database_exits_with_one_line() {
    let out = tollgate(
        &["migrate"],
        &[(
            "TOLLGATE__DATABASE__URL",
            "postgres://postgres@127.0.0.1:1/tollgate",
        )],
    );
    assert!(!out.status.success());
    let err = stderr_line(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("database"), "{err}");
}
