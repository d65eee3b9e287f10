//! Human-facing reports. `html` renders a probe report as one self-contained HTML file with SVG
//! charts (no scripts, no external assets), so it can be mailed or archived. A new chart is a
//! function in `html` returning an SVG string.

pub mod html;
