//! Progress of long work on stderr (`produce` from a big input, `consume --count`,
//! `rill bench`): a bar or a counter when stderr is a terminal, nothing at all when it
//! is not, so scripts and tests that read stderr see only the lines docs/CLI.md
//! promises.

use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Redraws per second at most: often enough to look alive, rarely enough to cost
/// nothing next to the work it shows.
const REDRAWS_PER_S_MAX: u8 = 10;

/// How often a counter redraws while nothing happens.
const TICK: Duration = Duration::from_millis(200);

/// Whether progress is shown: only to a person watching a terminal.
pub(crate) fn shown() -> bool {
    std::io::stderr().is_terminal()
}

fn target() -> ProgressDrawTarget {
    if shown() {
        ProgressDrawTarget::stderr_with_hz(REDRAWS_PER_S_MAX)
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// A bar towards `total` items named `unit` (`records`, `messages`).
pub(crate) fn bar(total: u64, unit: &str) -> ProgressBar {
    let style = ProgressStyle::with_template(&format!(
        "{{bar:30}} {{human_pos}}/{{human_len}} {unit} ({{per_sec}}, {{eta}} left)"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::with_draw_target(Some(total), target()).with_style(style)
}

/// A bar over `total` bytes of input, which also counts the `unit`s sent.
pub(crate) fn bytes(total: u64, unit: &str) -> ProgressBar {
    let style = ProgressStyle::with_template(&format!(
        "{{bar:30}} {{binary_bytes}}/{{binary_total_bytes}} ({{binary_bytes_per_sec}}, {{eta}} left) {{msg}} {unit}"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::with_draw_target(Some(total), target()).with_style(style)
}

/// A counter of `unit`s for work of unknown length.
pub(crate) fn counter(unit: &str) -> ProgressBar {
    let style = ProgressStyle::with_template(&format!(
        "{{spinner}} {{human_pos}} {unit} ({{per_sec}}, {{elapsed}})"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let bar = ProgressBar::with_draw_target(None, target()).with_style(style);
    if shown() {
        // Ticks on its own, so a quiet input still shows the command is alive.
        bar.enable_steady_tick(TICK);
    }
    bar
}
