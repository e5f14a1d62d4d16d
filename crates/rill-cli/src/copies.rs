//! Fast memory copies on AMD CPUs with FSRM.
//!
//! glibc's `memcpy` uses `rep movsb` for copies of a few KiB and up on CPUs that
//! announce FSRM ("fast short rep mov"). AMD CPUs announce it from Zen 3 on, but their
//! `rep movsb` slows down to a tenth or less when the destination sits a few bytes past
//! the source's alignment. A copy into `vec[5..]` from a page-aligned buffer is such a
//! case, and it is what rustls does with every TLS record it seals (a 5-byte header
//! comes first). On this project's AMD EPYC VM with glibc 2.36, 16 KiB copies ran at
//! 2.5 GB/s that way and at 37 GB/s aligned, and the vector loop runs 40 GB/s for both.
//!
//! glibc reads its tunables once, when the process starts. So on such a CPU, `rill`
//! starts itself again, once, with `glibc.cpu.x86_rep_movsb_threshold` raised above any
//! copy it makes. glibc then uses its vector loop up to the size where it switches to
//! non-temporal stores. A `GLIBC_TUNABLES` that already sets the threshold is left
//! alone, as is every other CPU. A program that embeds the SDK can set the same variable
//! itself (docs/SECURITY.md §5).

/// The tunable and the value `rill` runs with on an AMD CPU with FSRM.
pub(crate) const TUNABLE: &str = "glibc.cpu.x86_rep_movsb_threshold=4294967296";

/// On Linux with glibc, on an AMD CPU with FSRM, starts this program again with
/// [`TUNABLE`] added to `GLIBC_TUNABLES`. Returns if nothing needs doing, or if the new
/// start failed (the program then runs as it is).
#[cfg(all(target_os = "linux", target_arch = "x86_64", target_env = "gnu"))]
pub(crate) fn restart_with_vector_copies() {
    use std::os::unix::process::CommandExt;

    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if tunables.contains("x86_rep_movsb_threshold") {
        return;
    }
    let Ok(cpuinfo) = std::fs::read_to_string("/proc/cpuinfo") else {
        return;
    };
    if !amd_with_fsrm(&cpuinfo) {
        return;
    }
    let tunables = if tunables.is_empty() {
        TUNABLE.to_owned()
    } else {
        format!("{tunables}:{TUNABLE}")
    };
    let mut args = std::env::args_os();
    let Some(arg0) = args.next() else {
        return;
    };
    // `exec` returns only if it failed; the program then goes on as it is.
    let _failed = std::process::Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(args)
        .env("GLIBC_TUNABLES", tunables)
        .exec();
}

/// Elsewhere there is nothing to do.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64", target_env = "gnu")))]
pub(crate) fn restart_with_vector_copies() {}

/// Whether `/proc/cpuinfo`'s first processor is an AMD one whose flags include `fsrm`.
#[cfg_attr(
    not(all(target_os = "linux", target_arch = "x86_64", target_env = "gnu")),
    allow(dead_code)
)]
fn amd_with_fsrm(cpuinfo: &str) -> bool {
    let first = cpuinfo.split("\n\n").next().unwrap_or_default();
    let field = |name: &str| {
        first.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim())
        })
    };
    field("vendor_id") == Some("AuthenticAMD")
        && field("flags").is_some_and(|flags| flags.split_whitespace().any(|f| f == "fsrm"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_amd_cpu_with_fsrm_restarts() {
        let amd = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu erms fsrm avx2\n\nprocessor\t: 1\n";
        assert!(amd_with_fsrm(amd));
        let old_amd = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu erms avx2\n";
        assert!(!amd_with_fsrm(old_amd));
        let intel = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu erms fsrm avx2\n";
        assert!(!amd_with_fsrm(intel));
        // A flag that merely contains the letters does not count.
        let lookalike = "vendor_id\t: AuthenticAMD\nflags\t\t: fsrmx\n";
        assert!(!amd_with_fsrm(lookalike));
        assert!(!amd_with_fsrm(""));
    }
}
