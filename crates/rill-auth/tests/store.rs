//! The model of `auth.json`: what it keeps, what it refuses to read, and what a
//! credential proves against it.

use std::collections::BTreeSet;

use rill_auth::store::{AuthFile, Authenticated, Permission, Role};
use rill_auth::{AuthError, Secret};

const NOW: u64 = 1_800_000_000_000;

fn file_with_alice_and_root() -> AuthFile {
    let mut f = AuthFile::new();
    f.add_user(
        "alice",
        Role::User,
        &Secret::new("alice's password"),
        4096,
        NOW,
    )
    .unwrap();
    f.add_user(
        "root",
        Role::Admin,
        &Secret::new("root's password"),
        4096,
        NOW,
    )
    .unwrap();
    f
}

#[test]
fn the_file_round_trips_and_holds_no_clear_password_or_token() {
    let mut f = file_with_alice_and_root();
    f.grant(
        "alice",
        "shop",
        &Permission::parse_list("read,write").unwrap(),
    )
    .unwrap();
    let token = f.add_token("ci", "alice", NOW, None).unwrap();
    let bytes = f.to_json();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(!text.contains("alice's password"));
    assert!(!text.contains("root's password"));
    assert!(!text.contains(token.expose()));
    assert!(text.contains("$argon2id$"));
    assert_eq!(AuthFile::from_json(&bytes).unwrap(), f);
    // Debug output of the model shows no verifier either.
    let debug = format!("{f:?}");
    assert!(!debug.contains("argon2id"), "{debug}");
    assert!(!debug.contains("stored_key"), "{debug}");
}

#[test]
fn a_damaged_file_is_refused_not_read_as_empty() {
    let f = file_with_alice_and_root();
    let good = String::from_utf8(f.to_json()).unwrap();
    let alice_phc = f.users["alice"].password.argon2id.clone();
    let cases: Vec<(&str, String)> = vec![
        ("truncated", good[..good.len() / 2].to_owned()),
        ("empty", String::new()),
        (
            "version",
            good.replacen("\"version\": 1", "\"version\": 2", 1),
        ),
        (
            "phc",
            good.replacen(&alice_phc, "$argon2i$v=19$m=8,t=1,p=1$abc$def", 1),
        ),
        (
            "unknown field",
            good.replacen("\"version\": 1", "\"version\": 1, \"extra\": 0", 1),
        ),
        (
            "iterations",
            good.replacen("\"iterations\": 4096", "\"iterations\": 1", 1),
        ),
    ];
    for (what, text) in cases {
        assert_ne!(text, good, "{what}: the damage must change the file");
        assert!(
            matches!(
                AuthFile::from_json(text.as_bytes()),
                Err(AuthError::Invalid(_))
            ),
            "{what}"
        );
    }
    let mut orphan = f;
    orphan.acls.insert("ghost".into(), Default::default());
    assert!(orphan.validate().is_err());
}

#[test]
fn names_and_roles_and_permissions_are_checked() {
    let mut f = AuthFile::new();
    for bad in ["", ".hidden", "-x", "a b", "a/b", &"x".repeat(256)] {
        assert!(
            f.add_user(bad, Role::User, &Secret::new("a password"), 4096, NOW)
                .is_err(),
            "{bad:?}"
        );
    }
    f.add_user(
        "ops@example.com",
        Role::User,
        &Secret::new("a password"),
        4096,
        NOW,
    )
    .unwrap();
    assert!(
        f.add_user(
            "ops@example.com",
            Role::User,
            &Secret::new("a password"),
            4096,
            NOW
        )
        .is_err()
    );
    assert!(
        f.add_user("bob", Role::User, &Secret::new("short"), 4096, NOW)
            .is_err()
    );
    assert!(Role::parse("root").is_err());
    assert_eq!(Role::parse("admin").unwrap(), Role::Admin);
    assert!(Permission::parse_list("read,delete").is_err());
    assert!(Permission::parse_list("").is_err());
    assert_eq!(
        Permission::parse_list("manage, read").unwrap(),
        BTreeSet::from([Permission::Read, Permission::Manage])
    );
}

#[test]
fn acls_grant_per_stream_and_admins_need_none() {
    let mut f = file_with_alice_and_root();
    assert!(!f.allows("alice", "shop", Permission::Read));
    f.grant("alice", "shop", &BTreeSet::from([Permission::Read]))
        .unwrap();
    f.grant("alice", "shop", &BTreeSet::from([Permission::Write]))
        .unwrap();
    assert!(f.allows("alice", "shop", Permission::Read));
    assert!(f.allows("alice", "shop", Permission::Write));
    assert!(!f.allows("alice", "shop", Permission::Manage));
    assert!(!f.allows("alice", "bank", Permission::Read));
    assert!(f.allows("root", "bank", Permission::Manage));
    assert!(!f.allows("nobody", "shop", Permission::Read));
    assert!(
        f.grant("nobody", "shop", &BTreeSet::from([Permission::Read]))
            .is_err()
    );
    assert!(f.revoke("alice", "shop"));
    assert!(!f.revoke("alice", "shop"));
    assert!(!f.allows("alice", "shop", Permission::Read));
    assert!(f.acls.is_empty());
}

#[test]
fn a_token_works_until_it_expires_or_is_revoked_or_its_user_goes() {
    let mut f = file_with_alice_and_root();
    let forever = f.add_token("ci", "alice", NOW, None).unwrap();
    let brief = f
        .add_token("brief", "alice", NOW, Some(NOW + 1000))
        .unwrap();
    let who = f.authenticate_token(&forever, NOW).unwrap();
    assert_eq!(
        who,
        Authenticated {
            user: "alice".into(),
            token: Some("ci".into())
        }
    );
    assert!(f.authenticate_token(&brief, NOW + 999).is_ok());
    assert_eq!(
        f.authenticate_token(&brief, NOW + 1000),
        Err(AuthError::Failed)
    );
    let brief_who = f.authenticate_token(&brief, NOW).unwrap();
    assert!(f.still_valid(&brief_who, NOW + 999));
    assert!(
        !f.still_valid(&brief_who, NOW + 1000),
        "an expired token stops a live connection"
    );

    // A token of the right shape that was never made, and things of the wrong shape.
    let (never_made, _) = rill_auth::token::generate();
    assert_eq!(
        f.authenticate_token(&never_made, NOW),
        Err(AuthError::Failed)
    );
    assert!(
        f.authenticate_token(&Secret::new("alice's password"), NOW)
            .is_err()
    );
    assert!(
        f.add_token("ci", "alice", NOW, None).is_err(),
        "names are unique"
    );
    assert!(f.add_token("x", "nobody", NOW, None).is_err());

    assert!(f.remove_token("ci"));
    assert_eq!(f.authenticate_token(&forever, NOW), Err(AuthError::Failed));
    assert!(
        !f.still_valid(&who, NOW),
        "a revoked token stops a live connection"
    );

    let password_login = Authenticated {
        user: "alice".into(),
        token: None,
    };
    assert!(f.still_valid(&password_login, NOW));
    assert!(f.remove_user("alice"));
    assert!(
        !f.still_valid(&password_login, NOW),
        "a deleted user stops a live connection"
    );
    assert!(f.tokens.is_empty(), "a deleted user's tokens go with it");
}

#[test]
fn a_password_is_changed_by_both_verifiers() {
    let mut f = file_with_alice_and_root();
    let before = f.users["alice"].password.clone();
    f.set_password("alice", &Secret::new("a new password"), 4096)
        .unwrap();
    let after = &f.users["alice"].password;
    assert!(after.verify(&Secret::new("a new password")));
    assert!(!after.verify(&Secret::new("alice's password")));
    assert_ne!(before.scram, after.scram);
    assert!(
        f.set_password("nobody", &Secret::new("a new password"), 4096)
            .is_err()
    );
}

#[test]
fn a_password_is_checked_against_its_argon2id_hash() {
    let f = file_with_alice_and_root();
    let who = f
        .authenticate_password("alice", &Secret::new("alice's password"))
        .unwrap();
    assert_eq!(
        who,
        Authenticated {
            user: "alice".into(),
            token: None
        }
    );
    assert!(f.still_valid(&who, NOW));
    for (user, password) in [
        ("alice", "root's password"),
        ("alice", ""),
        ("nobody", "alice's password"),
    ] {
        assert!(matches!(
            f.authenticate_password(user, &Secret::new(password)),
            Err(AuthError::Failed)
        ));
    }
}
