//! wattflip-energy: the energy-analysis library of wattflip (`docs/uflip-method.md` §11, `docs/sources-and-drives.md` §4). It turns
//! shunt traces into energy and decimated power, finds each uFLIP run in a power series, computes the
//! per-run energy record, classifies background work and recommends pauses. Method and defaults:
//! `docs/energy-method.md`. To extend: a new trace format goes under `trace/`, a new analysis takes a
//! `&PowerSeries` and gets its own module with a config struct holding every constant.
//!
//! Layout:
//! - [`align`]: the trace's offset and rate error against the probe's schedule, checked or corrected.
//! - [`units`]: unit newtypes (`Watts`, `Joules`, `Volts`, `Ohms`, `Hertz`, `UnixNanos`, `Nanos`, …).
//! - [`trace`]: `ShuntCircuit`, the streaming integrators, CSV and raw (f32/i16 + sidecar) import.
//! - [`series`]: `PowerSeries`, the validated input of every analysis.
//! - [`idle`]: idle characterisation (baseline, period of regular idle work).
//! - [`record`]: the analysis' types: `Baseline`, `RunDetectConfig`, `RunInfo`, the `RunEnergy` record.
//! - [`run`]: run start/end detection and the per-run energy.
//! - [`fine`]: run edges refined to the sample (second pass over the trace).
//! - [`probe`]: a whole probe's runs: one idle baseline, neighbour-bounded runs, cut tails, plausibility.
//! - [`background`]: Table 2 classes and the §11.6 pause rule.
//! - [`uncertainty`]: 95 % half-widths of every energy figure from what limits the source.
//! - [`stats`]: median, 1.4826·MAD, Spearman ρ.
//! - [`error`]: `TraceError` (names file/line/column/key), `AnalysisError`, `ConfigError`.

#![forbid(unsafe_code)]

pub mod align;
pub mod background;
pub mod error;
pub mod fine;
pub mod idle;
pub mod probe;
pub mod record;
pub mod run;
pub mod series;
pub mod stats;
pub mod trace;
pub mod uncertainty;
pub mod units;

pub use align::{Alignment, MAX_OFFSET, MAX_RATE_ERROR};
pub use background::{
    classify, interferes, recommend_pause, recommend_pause_for_value, BackgroundClass, BackgroundObservation, Classification, ClassifyConfig, IoMix,
    PauseConfig, ValueRuns,
};
pub use error::{AnalysisError, ConfigError, KeyProblem, TraceError};
pub use fine::{CsvSamples, FineSamples, RawSamples};
pub use idle::{characterise_idle, IdleConfig, IdleProfile};
pub use probe::{analyze_next_run, analyze_probe, analyze_probe_fine, PreviousRun, ProbeAnalysis, MAX_UNMATCHED_FRACTION};
pub use run::{
    analyze_run, analyze_run_with_baseline, Baseline, BaselineSource, Efficiency, EndFound, RunDetectConfig, RunEnergy, RunInfo, StartFound, TimeBase,
};
pub use series::PowerSeries;
pub use trace::csv::{integrate_csv, integrate_csv_reader, read_csv_samples, CsvOptions, TimeUnit};
pub use trace::raw::{integrate_raw, integrate_raw_streaming, read_raw_samples, Sidecar, SidecarSyntax};
pub use trace::{FixedRateIntegrator, PowerWindow, SampleFormat, ShuntCircuit, TimedIntegrator, TraceSummary, DEFAULT_WINDOW};
pub use uncertainty::{Bounded, IdleU, Reporting, RunFigures, RunU95, SourceModel, Straddle};
pub use units::{Hertz, Joules, JoulesPerIo, JoulesPerMb, JoulesPerMib, Nanos, Ohms, UnixNanos, Volts, Watts};
