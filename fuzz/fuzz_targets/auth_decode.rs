//! The authentication exchange's decoders on arbitrary input: SCRAM messages as the
//! server reads them (client-first, then client-final against the state it left) and as
//! the client reads them (server-first, server-final), token strings, and `auth.json`.
//! None may panic; what parses must hold its invariants.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rill_auth::Secret;
use rill_auth::password::ScramVerifier;
use rill_auth::scram::{self, Client, ClientFinal, ClientFirst, Server, ServerFirst};
use rill_auth::store::AuthFile;

const SECRET: [u8; 32] = [3; 32];

fuzz_target!(|data: &[u8]| {
    // Split the input in two messages at the first NUL.
    let (a, b) = match data.iter().position(|&c| c == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };

    if let Ok(first) = ClientFirst::parse(a) {
        assert!(!first.user.is_empty() && first.user.len() <= scram::USER_BYTES_MAX);
        assert_eq!(scram::decode_name(&scram::encode_name(&first.user)).as_deref(), Ok(first.user.as_str()));
        assert!(!first.nonce.contains(','));
    }
    let _ = ClientFinal::parse(a);
    if let Ok(sf) = ServerFirst::parse(a) {
        assert!(!sf.salt.is_empty());
    }

    // The server: a user that exists (a fixed verifier) or not, then the second message.
    let server = Server { secret: &SECRET, iterations: 4096 };
    let verifier = ScramVerifier {
        salt: vec![1; 16],
        iterations: 4096,
        stored_key: [2; 32],
        server_key: [4; 32],
    };
    if let Ok((awaiting, reply)) = server.on_client_first(a, |u| (u == "user").then(|| verifier.clone())) {
        assert!(ServerFirst::parse(&reply).is_ok(), "the server's own reply parses");
        // A forged proof never verifies against a stored key nobody derived.
        assert!(awaiting.on_client_final(b).is_err());
    }

    // The client, against whatever a server says (iterations bounded so a run is short:
    // an input that claims more is refused before any PBKDF2).
    if let Ok(sf) = ServerFirst::parse(a) {
        if sf.iterations <= 8192 {
            if let Ok((client, _)) = Client::start_with_nonce("user", Secret::new("pencil"), "abc".into()) {
                if let Ok((awaiting, _)) = client.on_server_first(a) {
                    let _ = awaiting.on_server_final(b);
                }
            }
        }
    }

    let _ = rill_auth::token::check_shape(&Secret::new(String::from_utf8_lossy(a).into_owned()));
    if let Ok(file) = AuthFile::from_json(data) {
        assert!(file.validate().is_ok());
        assert_eq!(AuthFile::from_json(&file.to_json()).ok(), Some(file));
    }
});
