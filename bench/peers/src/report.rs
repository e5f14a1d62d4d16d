//! The comparison report: a text table, JSON, and an SVG chart.
