//! The SCRAM-SHA-256 exchange: RFC 7677's vector on both sides, and every way it fails.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use rill_auth::password::ScramVerifier;
use rill_auth::scram::{self, Client, ClientFinal, ClientFirst, Server, ServerFirst};
use rill_auth::{AuthError, Secret};

// RFC 7677 §3.
const CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const SALT_B64: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

const SECRET: [u8; 32] = [7; 32];

fn rfc_verifier() -> ScramVerifier {
    use base64::Engine;
    let salt = base64::engine::general_purpose::STANDARD
        .decode(SALT_B64)
        .unwrap();
    ScramVerifier::derive_with_salt(&Secret::new("pencil"), salt, 4096).unwrap()
}

fn server() -> Server<'static> {
    Server {
        secret: &SECRET,
        iterations: 4096,
    }
}

#[test]
fn the_client_produces_rfc_7677s_messages() {
    let (client, first) =
        Client::start_with_nonce("user", Secret::new("pencil"), CLIENT_NONCE.into()).unwrap();
    assert_eq!(first, CLIENT_FIRST.as_bytes());
    let (awaiting, last) = client.on_server_first(SERVER_FIRST.as_bytes()).unwrap();
    assert_eq!(String::from_utf8(last).unwrap(), CLIENT_FINAL);
    awaiting.on_server_final(SERVER_FINAL.as_bytes()).unwrap();
}

#[test]
fn the_server_answers_rfc_7677s_messages() {
    let (awaiting, first) = server()
        .on_client_first_with_nonce(
            CLIENT_FIRST.as_bytes(),
            |user| (user == "user").then(rfc_verifier),
            SERVER_NONCE.into(),
        )
        .unwrap();
    assert_eq!(String::from_utf8(first).unwrap(), SERVER_FIRST);
    assert_eq!(awaiting.claimed_user(), "user");
    let (user, last) = awaiting.on_client_final(CLIENT_FINAL.as_bytes()).unwrap();
    assert_eq!(user, "user");
    assert_eq!(String::from_utf8(last).unwrap(), SERVER_FINAL);
}

/// Runs a whole exchange: the client knows `password`, the server knows `known` (the
/// verifier of `user`, if any). Returns the server's verdict and, on success, the
/// client's check of the server.
fn exchange(
    user: &str,
    password: &str,
    known: Option<(&str, &ScramVerifier)>,
) -> Result<(), AuthError> {
    let (client, first) = Client::start(user, Secret::new(password))?;
    let (awaiting, server_first) = server().on_client_first(&first, |name| {
        known.filter(|(n, _)| *n == name).map(|(_, v)| v.clone())
    })?;
    let (client, last) = client.on_server_first(&server_first)?;
    let (_, server_final) = awaiting.on_client_final(&last)?;
    client.on_server_final(&server_final)
}

#[test]
fn a_wrong_password_and_an_unknown_user_fail_alike() {
    let v = ScramVerifier::derive(&Secret::new("right password"), 4096).unwrap();
    exchange("alice", "right password", Some(("alice", &v))).unwrap();
    assert_eq!(
        exchange("alice", "wrong password", Some(("alice", &v))),
        Err(AuthError::Failed)
    );
    assert_eq!(
        exchange("mallory", "right password", Some(("alice", &v))),
        Err(AuthError::Failed)
    );
    // With no users at all, every exchange fails the same way.
    assert_eq!(
        exchange("alice", "right password", None),
        Err(AuthError::Failed)
    );
}

fn server_first_of(user: &str, known: Option<&ScramVerifier>) -> ServerFirst {
    let (_, first) = Client::start(user, Secret::new("whatever pw")).unwrap();
    let (_, sf) = server()
        .on_client_first(&first, |_| known.cloned())
        .unwrap();
    ServerFirst::parse(&sf).unwrap()
}

#[test]
fn an_unknown_user_gets_a_challenge_shaped_like_a_real_one_and_the_same_each_time() {
    let v = ScramVerifier::derive(&Secret::new("right password"), 4096).unwrap();
    let real = server_first_of("alice", Some(&v));
    let fake = server_first_of("mallory", None);
    assert_eq!(real.salt.len(), fake.salt.len());
    assert_eq!(real.iterations, fake.iterations);
    let again = server_first_of("mallory", None);
    assert_eq!(
        fake.salt, again.salt,
        "a stand-in salt is stable, as a real one is"
    );
    assert_ne!(fake.salt, server_first_of("eve", None).salt);
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn the_server_spends_about_the_same_on_an_unknown_user_as_on_a_wrong_password() {
    let v = ScramVerifier::derive(&Secret::new("right password"), 4096).unwrap();
    // Time whole exchanges where the client's final message matches the server's
    // nonce: a fresh client per round, its PBKDF2 outside the timed part.
    let round = |user: &str| {
        let (client, first) = Client::start(user, Secret::new("wrong password")).unwrap();
        let t = Instant::now();
        let (awaiting, sf) = server()
            .on_client_first(&first, |n| (n == "alice").then(|| v.clone()))
            .unwrap();
        let t1 = t.elapsed();
        let (_, last) = client.on_server_first(&sf).unwrap();
        let t = Instant::now();
        assert_eq!(awaiting.on_client_final(&last), Err(AuthError::Failed));
        t1 + t.elapsed()
    };
    for _ in 0..5 {
        round("alice");
    }
    let wrong = median((0..61).map(|_| round("alice")).collect());
    let unknown = median((0..61).map(|_| round("mallory")).collect());
    let (lo, hi) = if wrong < unknown {
        (wrong, unknown)
    } else {
        (unknown, wrong)
    };
    assert!(
        hi <= lo * 4 + Duration::from_micros(50),
        "wrong password {wrong:?}, unknown user {unknown:?}"
    );
}

#[test]
fn a_server_that_does_not_know_the_password_is_caught_by_the_client() {
    let (client, first) = Client::start("alice", Secret::new("right password")).unwrap();
    // An impostor that never had alice's verifier answers with one of its own.
    let impostor = ScramVerifier::derive(&Secret::new("right passwore"), 4096).unwrap();
    let (awaiting, sf) = server()
        .on_client_first(&first, |_| Some(impostor.clone()))
        .unwrap();
    let (client, last) = client.on_server_first(&sf).unwrap();
    assert_eq!(awaiting.on_client_final(&last), Err(AuthError::Failed));
    // And had it answered anyway, the signature it can make is not the right one.
    let forged = format!("v={SALT_B64}AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
    assert!(client.on_server_final(forged.as_bytes()).is_err());
}

#[test]
fn the_client_refuses_a_server_nonce_that_is_not_its_own_extended_or_too_much_work() {
    let start = || {
        Client::start_with_nonce("user", Secret::new("pencil"), CLIENT_NONCE.into())
            .unwrap()
            .0
    };
    for bad in [
        "r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        "r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4000000000",
        "r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1",
        "r=rOprNGfwEbeRWgbNEkqOxyz,s=,i=4096",
        "r=rOprNGfwEbeRWgbNEkqOxyz,s=!!!,i=4096",
        "r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=-1",
        "m=ext,r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        "e=other-error",
    ] {
        assert!(start().on_server_first(bad.as_bytes()).is_err(), "{bad}");
    }
}

#[test]
fn the_server_refuses_what_it_does_not_support_or_a_tampered_final_message() {
    for bad in [
        "p=tls-unique,,n=user,r=abc",
        "n,a=admin,n=user,r=abc",
        "n,,m=ext,n=user,r=abc",
        "n,,n=,r=abc",
        "n,,n=us=er,r=abc",
        "n,,r=abc,n=user",
        "n,,n=user,r=a,b",
        "x,,n=user,r=abc",
        "",
    ] {
        assert!(
            matches!(
                server().on_client_first(bad.as_bytes(), |_| None),
                Err(AuthError::Malformed(_))
            ),
            "{bad}"
        );
    }
    let awaiting = || {
        server()
            .on_client_first_with_nonce(
                CLIENT_FIRST.as_bytes(),
                |_| Some(rfc_verifier()),
                SERVER_NONCE.into(),
            )
            .unwrap()
            .0
    };
    // Another nonce, another channel binding, a flipped proof bit.
    let other_nonce = CLIENT_FINAL.replace("k0,p=", "k1,p=");
    let other_binding = CLIENT_FINAL.replace("c=biws", "c=eSws");
    let flipped = CLIENT_FINAL.replace("dHzb", "dHzc");
    assert_eq!(
        awaiting().on_client_final(other_nonce.as_bytes()),
        Err(AuthError::Failed)
    );
    assert!(
        awaiting()
            .on_client_final(other_binding.as_bytes())
            .is_err()
    );
    assert_eq!(
        awaiting().on_client_final(flipped.as_bytes()),
        Err(AuthError::Failed)
    );
    assert!(awaiting().on_client_final(b"c=biws,r=x").is_err());
    // The untouched message still succeeds: the failures above are the tampering's.
    awaiting().on_client_final(CLIENT_FINAL.as_bytes()).unwrap();
}

#[test]
fn messages_longer_than_the_bound_are_refused_unread() {
    let long = format!("n,,n=user,r={}", "a".repeat(scram::MESSAGE_BYTES_MAX));
    assert_eq!(
        ClientFirst::parse(long.as_bytes()),
        Err(AuthError::Malformed("message too long"))
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_message_parser_panics_on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = ClientFirst::parse(&bytes);
        let _ = ClientFinal::parse(&bytes);
        let _ = ServerFirst::parse(&bytes);
        let _ = server().on_client_first(&bytes, |_| None);
    }

    #[test]
    fn any_user_name_survives_the_client_first_message(name in "[ -~]{1,64}") {
        let (_, first) = Client::start(&name, Secret::new("whatever pw")).unwrap();
        let parsed = ClientFirst::parse(&first).unwrap();
        prop_assert_eq!(parsed.user, name);
    }
}

proptest! {
    // Each case runs PBKDF2 three times (the verifier, the client, a wrong client).
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn an_exchange_succeeds_exactly_when_the_password_is_right(
        name in "[a-z][a-z0-9._@-]{0,20}",
        password in "\\PC{8,40}",
        other in "\\PC{8,40}",
    ) {
        let v = ScramVerifier::derive(&Secret::new(password.clone()), 4096).unwrap();
        prop_assert_eq!(exchange(&name, &password, Some((&name, &v))), Ok(()));
        if other != password {
            prop_assert_eq!(exchange(&name, &other, Some((&name, &v))), Err(AuthError::Failed));
        }
    }
}

#[test]
fn no_state_or_message_prints_a_password_a_proof_or_a_key() {
    let (client, first) =
        Client::start_with_nonce("user", Secret::new("pencil"), CLIENT_NONCE.into()).unwrap();
    assert!(!format!("{client:?}").contains("pencil"));
    let (awaiting, _) = server()
        .on_client_first_with_nonce(&first, |_| Some(rfc_verifier()), SERVER_NONCE.into())
        .unwrap();
    let (client, last) = client.on_server_first(SERVER_FIRST.as_bytes()).unwrap();
    let proof = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    let parsed = ClientFinal::parse(&last).unwrap();
    use base64::Engine;
    let v = rfc_verifier();
    let keys = [
        base64::engine::general_purpose::STANDARD.encode(v.stored_key),
        format!("{:?}", v.stored_key),
        format!("{:?}", v.server_key),
        format!("{:?}", parsed.proof),
        proof.to_owned(),
    ];
    for shown in [
        format!("{client:?}"),
        format!("{awaiting:?}"),
        format!("{parsed:?}"),
        format!("{v:?}"),
    ] {
        for key in &keys {
            assert!(!shown.contains(key.as_str()), "{shown}");
        }
        assert!(!shown.contains("pencil"));
    }
}
