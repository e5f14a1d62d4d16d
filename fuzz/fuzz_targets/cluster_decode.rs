//! The decoders of `rill-cluster` (docs/REPLICATION.md §5, §9) on arbitrary bytes: the
//! metadata log file (`meta.log`), node-to-node frames with their request bodies, and a
//! partition's entry pointers (`raft/entries`) and a partition group's append requests
//! (a JSON head, then raw batches).
//!
//! Neither may panic, hang or allocate what a length field says before the bytes are
//! there. A log that decodes re-encodes to entries that decode to the same entries, and
//! its whole frames never extend past the input. Frames split the input into a prefix
//! of whole frames, each within the bounds, whose bodies decode to a typed request or a
//! typed error. A pointer that decodes re-encodes to the same bytes; an append request
//! that decodes re-encodes to one that decodes to the same entries.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rill_cluster::partition::pointer::Pointer;
use rill_cluster::peer::partition::{decode_append, encode_append};
use rill_cluster::peer::{FRAME_MAX, decode_frame, decode_request};
use rill_cluster::store::{decode_log, encode_entry};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    if mode % 4 == 3 {
        let body = bytes::Bytes::copy_from_slice(bytes);
        if let Ok((group, incarnation, rpc)) = decode_append(&body) {
            let again =
                encode_append(&group, incarnation, &rpc).expect("a decoded request encodes");
            let (group2, incarnation2, rpc2) =
                decode_append(&bytes::Bytes::from(again)).expect("a re-encoded request decodes");
            assert_eq!(group2, group);
            assert_eq!(incarnation2, incarnation);
            assert_eq!(rpc2.entries, rpc.entries);
            assert_eq!(rpc2.prev_log_id, rpc.prev_log_id);
        }
    } else if mode % 4 == 2 {
        if let Ok(pointer) = Pointer::decode(bytes) {
            let again = pointer.encode().expect("a decoded pointer encodes");
            let back = Pointer::decode(&again).expect("a re-encoded pointer decodes");
            assert_eq!(back, pointer);
            if !matches!(
                pointer.kind,
                rill_cluster::partition::pointer::PointerKind::Membership(_)
            ) {
                assert_eq!(again, bytes);
            }
        }
    } else if mode % 4 == 0 {
        if let Ok((entries, whole)) = decode_log(bytes) {
            assert!(whole <= bytes.len());
            let mut again = Vec::new();
            for entry in &entries {
                again.extend_from_slice(&encode_entry(entry).expect("a decoded entry encodes"));
            }
            let (back, len) = decode_log(&again).expect("re-encoded entries decode");
            assert_eq!(len, again.len());
            assert_eq!(back, entries);
        }
    } else {
        let mut rest = bytes;
        while let Ok(Some(frame)) = decode_frame(rest) {
            assert!(frame.len >= 13 && frame.len <= 4 + FRAME_MAX as usize);
            assert!(frame.len <= rest.len());
            let _ = decode_request(frame.kind, frame.body);
            rest = &rest[frame.len..];
        }
    }
});
