//! The power-loss model itself: durable against current bytes, the directory sync rules,
//! renames, dying, and what torn images may and may not contain.

use std::collections::BTreeSet;
use std::path::Path;

use super::disk::{EIO, ENOSPC};
use super::*;

fn p(s: &str) -> &Path {
    Path::new(s)
}

/// A disk with `/d` created and durable.
fn disk_with_dir() -> SimIo {
    let sim = SimIo::new(1);
    sim.create_dir_all(p("/d")).unwrap();
    sim.sync_dir(p("/")).unwrap();
    sim
}

fn write(sim: &SimIo, path: &str, bytes: &[u8], pos: u64) -> Arc<dyn IoFile> {
    let f = sim.open(p(path), true).unwrap();
    f.write_all_at(bytes, pos).unwrap();
    f
}

#[test]
fn writes_are_durable_only_after_sync_data() {
    let sim = disk_with_dir();
    let f = write(&sim, "/d/a", b"hello", 0);
    sim.sync_dir(p("/d")).unwrap();
    assert_eq!(sim.current_bytes(p("/d/a")).unwrap(), b"hello");
    assert_eq!(sim.durable_bytes(p("/d/a")).unwrap(), b"");
    let lost = sim.power_loss_durable();
    assert_eq!(
        lost.current_bytes(p("/d/a")).unwrap(),
        b"",
        "entry durable, data not"
    );
    f.sync_data().unwrap();
    assert_eq!(sim.durable_bytes(p("/d/a")).unwrap(), b"hello");
    f.set_len(2).unwrap();
    f.write_all_at(b"!", 10).unwrap();
    assert_eq!(
        sim.current_bytes(p("/d/a")).unwrap(),
        b"he\0\0\0\0\0\0\0\0!"
    );
    let lost = sim.power_loss_durable();
    assert_eq!(lost.current_bytes(p("/d/a")).unwrap(), b"hello");
    // A killed process loses nothing, but a later power loss still can.
    let killed = sim.process_crash();
    assert_eq!(
        killed.current_bytes(p("/d/a")),
        sim.current_bytes(p("/d/a"))
    );
    let lost = killed.power_loss_durable();
    assert_eq!(lost.current_bytes(p("/d/a")).unwrap(), b"hello");
}

#[test]
fn entries_are_durable_only_after_their_directory_is_synced() {
    let sim = SimIo::new(2);
    sim.create_dir_all(p("/a/b/c")).unwrap();
    let f = write(&sim, "/a/b/c/f", b"x", 0);
    f.sync_data().unwrap();
    sim.sync_dir(p("/a/b/c")).unwrap();
    // The file's entry is durable, but not the directories above it.
    assert!(!sim.power_loss_durable().exists(p("/a")));
    sim.sync_dir(p("/a/b")).unwrap();
    sim.sync_dir(p("/a")).unwrap();
    assert!(!sim.power_loss_durable().exists(p("/a")), "/ not synced");
    sim.sync_dir(p("/")).unwrap();
    let lost = sim.power_loss_durable();
    assert!(lost.is_dir(p("/a/b/c")));
    assert_eq!(lost.current_bytes(p("/a/b/c/f")).unwrap(), b"x");
    assert_eq!(
        sim.durable_entries(p("/a/b/c")).unwrap(),
        vec![PathBuf::from("/a/b/c/f")]
    );

    // A removal is undone by a power loss until the directory is synced.
    sim.remove_file(p("/a/b/c/f")).unwrap();
    assert!(!sim.exists(p("/a/b/c/f")));
    assert!(sim.power_loss_durable().exists(p("/a/b/c/f")));
    // The open handle still reads the removed file.
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, 0).unwrap();
    sim.sync_dir(p("/a/b/c")).unwrap();
    assert!(!sim.power_loss_durable().exists(p("/a/b/c/f")));

    // remove_dir_all: durable once the parent is synced.
    sim.remove_dir_all(p("/a/b")).unwrap();
    assert!(!sim.exists(p("/a/b")));
    assert!(sim.power_loss_durable().is_dir(p("/a/b/c")));
    sim.sync_dir(p("/a")).unwrap();
    assert!(!sim.power_loss_durable().exists(p("/a/b")));
    assert!(sim.power_loss_durable().is_dir(p("/a")));
}

#[test]
fn sync_data_does_not_make_a_new_entry_durable() {
    let sim = disk_with_dir();
    let f = write(&sim, "/d/new", b"data", 0);
    f.sync_data().unwrap();
    assert!(!sim.power_loss_durable().exists(p("/d/new")));
    assert_eq!(sim.durable_bytes(p("/d/new")), None);
}

#[test]
fn rename_replaces_and_is_durable_with_its_directory() {
    let sim = disk_with_dir();
    let old = write(&sim, "/d/file", b"old", 0);
    old.sync_data().unwrap();
    let tmp = write(&sim, "/d/file.tmp", b"new", 0);
    tmp.sync_data().unwrap();
    sim.sync_dir(p("/d")).unwrap();
    sim.rename(p("/d/file.tmp"), p("/d/file")).unwrap();
    assert_eq!(sim.current_bytes(p("/d/file")).unwrap(), b"new");
    assert!(!sim.exists(p("/d/file.tmp")));
    let lost = sim.power_loss_durable();
    assert_eq!(lost.current_bytes(p("/d/file")).unwrap(), b"old");
    assert_eq!(lost.current_bytes(p("/d/file.tmp")).unwrap(), b"new");
    sim.sync_dir(p("/d")).unwrap();
    let lost = sim.power_loss_durable();
    assert_eq!(lost.current_bytes(p("/d/file")).unwrap(), b"new");
    assert!(!lost.exists(p("/d/file.tmp")));
    // The replaced file's handle still reads its own bytes.
    let mut b = [0u8; 3];
    old.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"old");
}

#[test]
fn a_rename_across_directories_is_atomic() {
    for seed in 0..200 {
        let sim = SimIo::new(seed);
        sim.create_dir_all(p("/x")).unwrap();
        sim.create_dir_all(p("/y")).unwrap();
        write(&sim, "/x/f", b"f", 0).sync_data().unwrap();
        for d in ["/x", "/y", "/"] {
            sim.sync_dir(p(d)).unwrap();
        }
        sim.rename(p("/x/f"), p("/y/g")).unwrap();
        if seed % 2 == 0 {
            // Syncing the directory it left commits the whole rename.
            sim.sync_dir(p("/x")).unwrap();
        }
        let lost = sim.power_loss(&mut SimRng::new(seed));
        let (x, y) = (lost.exists(p("/x/f")), lost.exists(p("/y/g")));
        assert!(x != y, "seed {seed}: exactly one name survives ({x}, {y})");
        if seed % 2 == 0 {
            assert!(y, "seed {seed}: committed");
        }
    }
}

#[test]
fn rename_of_a_directory_moves_its_subtree() {
    let sim = disk_with_dir();
    sim.create_dir_all(p("/d/old/sub")).unwrap();
    write(&sim, "/d/old/sub/f", b"1", 0);
    sim.rename(p("/d/old"), p("/d/new")).unwrap();
    assert_eq!(sim.current_bytes(p("/d/new/sub/f")).unwrap(), b"1");
    assert!(!sim.exists(p("/d/old")));
    assert!(sim.rename(p("/d/new"), p("/d/new/sub/inside")).is_err());
    sim.create_dir_all(p("/d/full/x")).unwrap();
    let e = sim.rename(p("/d/new"), p("/d/full")).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::DirectoryNotEmpty);
}

#[test]
fn errors_look_like_the_real_file_system() {
    let sim = disk_with_dir();
    write(&sim, "/d/f", b"1", 0);
    let kind = |r: io::Result<()>| r.unwrap_err().kind();
    assert_eq!(
        kind(sim.remove_file(p("/d/missing"))),
        io::ErrorKind::NotFound
    );
    assert_eq!(kind(sim.remove_file(p("/d"))), io::ErrorKind::IsADirectory);
    assert_eq!(
        kind(sim.remove_dir_all(p("/d/f"))),
        io::ErrorKind::NotADirectory
    );
    assert_eq!(
        kind(sim.create_dir_all(p("/d/f/g"))),
        io::ErrorKind::NotADirectory
    );
    assert_eq!(
        sim.open(p("/d/missing"), false).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    assert_eq!(
        sim.open(p("/nowhere/f"), true).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    assert_eq!(
        sim.open(p("/d"), true).unwrap_err().kind(),
        io::ErrorKind::IsADirectory
    );
    assert_eq!(sim.read_dir(p("/d")).unwrap(), vec![PathBuf::from("/d/f")]);
}

#[test]
fn after_the_crash_point_every_operation_fails() {
    let sim = disk_with_dir();
    let f = write(&sim, "/d/a", b"abc", 0);
    sim.crash_after(2);
    f.write_all_at(b"d", 3).unwrap();
    f.sync_data().unwrap();
    assert!(!sim.crashed());
    let e = f.write_all_at(b"e", 4).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(EIO));
    assert!(sim.crashed());
    assert!(f.sync_data().is_err());
    assert!(f.read_at(&mut [0u8; 1], 0).is_err());
    assert!(f.size().is_err());
    assert!(sim.read_dir(p("/d")).is_err());
    assert!(sim.open(p("/d/a"), false).is_err());
    assert!(sim.sync_dir(p("/d")).is_err());
    assert!(sim.trace_tail().iter().any(|l| l.contains("CRASH")));
    // What was synced before the crash is durable; the dying write is not.
    assert_eq!(sim.durable_bytes(p("/d/a")), None, "entry never synced");
    let killed = sim.process_crash();
    assert!(!killed.crashed());
    let now = killed.current_bytes(p("/d/a")).unwrap();
    assert!(now == b"abcd" || now == b"abcde", "{now:?}");
    // A dying write lands whole pages: nothing, all, or up to a page boundary.
    let mut lengths = BTreeSet::new();
    for seed in 0..50 {
        let sim = SimIo::new(seed);
        let f = write(&sim, "/b", &[1u8; 100], 0);
        sim.crash_after(0);
        assert!(f.write_all_at(&[2u8; 9000], 4000).is_err());
        lengths.insert(sim.process_crash().current_bytes(p("/b")).unwrap().len());
    }
    assert_eq!(lengths, BTreeSet::from([100, 4096, 8192, 12288, 13000]));
    assert_eq!(
        killed.open(p("/d/a"), false).unwrap().size().unwrap(),
        now.len() as u64
    );
}

#[test]
fn torn_images_hold_durable_bytes_and_some_version_of_each_page() {
    let config = SimConfig {
        page_bytes: 64,
        sector_bytes: 16,
        bytes_max: 1 << 20,
    };
    // Appends in several rounds, the first one synced.
    let sim = SimIo::with_config(config, 3);
    sim.create_dir_all(p("/d")).unwrap();
    sim.sync_dir(p("/")).unwrap();
    let f = sim.open(p("/d/log"), true).unwrap();
    sim.sync_dir(p("/d")).unwrap();
    let synced: Vec<u8> = (0..100u8).collect();
    f.write_all_at(&synced, 0).unwrap();
    f.sync_data().unwrap();
    let full: Vec<u8> = (0..=255u8).cycle().take(400).map(|b| b | 1).collect();
    for chunk in 0..6 {
        let at = 100 + chunk * 50;
        f.write_all_at(&full[at..at + 50], at as u64).unwrap();
    }
    let (mut saw_all, mut saw_none, mut saw_zeros, mut saw_short) = (false, false, false, false);
    for seed in 0..300 {
        let image = sim.power_loss(&mut SimRng::new(seed));
        let got = image.current_bytes(p("/d/log")).unwrap();
        assert!(
            got.len() >= 100 && got.len() <= 400,
            "seed {seed}: {}",
            got.len()
        );
        assert!(
            (got.len() - 100).is_multiple_of(50),
            "seed {seed}: a length the file had"
        );
        assert_eq!(&got[..100], &synced[..], "seed {seed}: durable bytes kept");
        // Every unsynced byte is its written value or zero (never written back).
        for (i, &b) in got.iter().enumerate().skip(100) {
            assert!(b == full[i] || b == 0, "seed {seed}: byte {i} is {b}");
        }
        saw_all |= got[100..] == full[100..];
        saw_none |= got.len() == 100;
        saw_zeros |= got.iter().skip(100).any(|&b| b == 0);
        saw_short |= got.len() > 100 && got.len() < 400;
        // The image is a disk of its own: all durable, nothing pending.
        assert_eq!(image.durable_bytes(p("/d/log")).unwrap(), got);
    }
    assert!(saw_all && saw_none && saw_zeros && saw_short);
}

#[test]
fn torn_images_may_hold_an_older_version_of_a_rewritten_page() {
    // A small file rewritten in place (like the recovery point): after a power loss it
    // holds one of the versions it had, never a byte mix within a sector.
    let sim = disk_with_dir();
    let f = write(&sim, "/d/point", &[0u8; 44], 0);
    f.sync_data().unwrap();
    sim.sync_dir(p("/d")).unwrap();
    for v in 1..=5u8 {
        f.write_all_at(&[v; 44], 0).unwrap();
    }
    let mut seen = BTreeSet::new();
    for seed in 0..200 {
        let got = sim
            .power_loss(&mut SimRng::new(seed))
            .current_bytes(p("/d/point"))
            .unwrap();
        assert_eq!(got.len(), 44);
        assert!(got.iter().all(|&b| b == got[0]), "seed {seed}: {got:?}");
        seen.insert(got[0]);
    }
    assert_eq!(seen, (0..=5).collect::<BTreeSet<u8>>());
}

#[test]
fn a_torn_power_loss_keeps_a_prefix_of_directory_changes() {
    for seed in 0..200 {
        let sim = disk_with_dir();
        for name in ["/d/1", "/d/2", "/d/3", "/d/4"] {
            write(&sim, name, b"x", 0).sync_data().unwrap();
        }
        let image = sim.power_loss(&mut SimRng::new(seed));
        let present: Vec<bool> = (1..=4)
            .map(|i| image.exists(p(&format!("/d/{i}"))))
            .collect();
        let kept = present.iter().take_while(|&&b| b).count();
        assert!(
            present[kept..].iter().all(|&b| !b),
            "seed {seed}: {present:?}"
        );
    }
}

#[test]
fn deleted_files_are_freed_and_the_disk_is_bounded() {
    let config = SimConfig {
        bytes_max: 10_000,
        ..SimConfig::default()
    };
    let sim = SimIo::with_config(config, 4);
    sim.create_dir_all(p("/d")).unwrap();
    let f = sim.open(p("/d/big"), true).unwrap();
    f.write_all_at(&[1u8; 4000], 0).unwrap();
    let e = f.write_all_at(&[1u8; 4000], 4000).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(ENOSPC));
    f.sync_data().unwrap();
    assert_eq!(sim.bytes_used(), 8000, "current and durable copies");
    drop(f);
    sim.remove_file(p("/d/big")).unwrap();
    assert_eq!(
        sim.bytes_used(),
        8000,
        "a power loss may still bring it back"
    );
    sim.sync_dir(p("/d")).unwrap();
    assert_eq!(sim.bytes_used(), 0, "no entry or handle reaches it");
}

#[test]
fn the_same_seed_gives_the_same_image() {
    let sim = disk_with_dir();
    let f = write(&sim, "/d/a", &[7u8; 10_000], 0);
    f.write_all_at(&[9u8; 5000], 2000).unwrap();
    let a = sim
        .power_loss(&mut SimRng::new(42))
        .current_bytes(p("/d/a"));
    let b = sim
        .power_loss(&mut SimRng::new(42))
        .current_bytes(p("/d/a"));
    assert_eq!(a, b);
}
