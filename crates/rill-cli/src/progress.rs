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

/// A bar towards `total` items named `unit` (`records`, `messages`). The templates stay
/// well within 80 columns: a line that wraps is redrawn below itself.
pub(crate) fn bar(total: u64, unit: &str) -> ProgressBar {
    ProgressBar::with_draw_target(Some(total), target()).with_style(style(&bar_template(unit)))
}

/// A bar over `total` bytes of input, which also counts the `unit`s sent.
pub(crate) fn bytes(total: u64, unit: &str) -> ProgressBar {
    ProgressBar::with_draw_target(Some(total), target()).with_style(style(&bytes_template(unit)))
}

/// A counter of `unit`s for work of unknown length.
pub(crate) fn counter(unit: &str) -> ProgressBar {
    let bar =
        ProgressBar::with_draw_target(None, target()).with_style(style(&counter_template(unit)));
    if shown() {
        // Ticks on its own, so a quiet input still shows the command is alive.
        bar.enable_steady_tick(TICK);
    }
    bar
}

fn bar_template(unit: &str) -> String {
    format!("{{bar:20}} {{human_pos}}/{{human_len}} {unit}, {{eta}} left")
}

fn bytes_template(unit: &str) -> String {
    format!("{{bar:20}} {{binary_bytes}}/{{binary_total_bytes}}, {{msg}} {unit}, {{eta}} left")
}

fn counter_template(unit: &str) -> String {
    format!("{{spinner}} {{human_pos}} {unit}, {{elapsed}}")
}

/// The style of a template; the templates are constants, checked by a test, so the
/// plain bar in its place is never drawn in practice.
fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_parses() {
        for template in [
            bar_template("records"),
            bytes_template("records"),
            counter_template("records"),
        ] {
            assert!(
                ProgressStyle::with_template(&template).is_ok(),
                "{template}"
            );
        }
    }
}
