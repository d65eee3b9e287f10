//! Imports an oscilloscope or data-logger shunt trace (CSV `time,V_shunt`, or raw little-endian
//! f32/i16 with a sidecar file) as a power series, with the paper's formula
//! E = (V_shunt/R)·(U − V_shunt)·Δt (docs/uflip-method.md §11.1, docs/sources-and-drives.md §4), and hands back the file as a
//! source of its own samples for the second pass that refines run edges to the sample; with an
//! estimated [`Alignment`], re-imported on the corrected time base (`--align auto`).

use std::path::{Path, PathBuf};
use wattflip_energy::{
    integrate_csv, integrate_raw, Alignment, CsvOptions, CsvSamples, FineSamples, Hertz, Nanos, Ohms, PowerSeries, RawSamples, ShuntCircuit, Sidecar, TimeUnit,
    TraceSummary, UnixNanos, Volts, MAX_RATE_ERROR,
};

/// How to read a CSV trace (a raw trace carries these in its sidecar).
#[derive(Debug, Clone)]
pub struct CsvCircuit {
    pub shunt_ohms: Option<f64>,
    pub supply_volts: Option<f64>,
    pub time_unit: TimeUnit,
    /// UTC of `time = 0` in the file.
    pub time_origin_ns: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Trace(#[from] wattflip_energy::TraceError),
    #[error("{file}: a CSV trace needs --shunt-ohms and --supply-volts (R and U of the paper's formula)")]
    MissingCircuit { file: PathBuf },
    #[error("{file}: {0}", file = .1.display())]
    Config(wattflip_energy::ConfigError, PathBuf),
    #[error("{file}: the trace has no UTC start: give --time-origin-ns (CSV) or start_time_utc_ns in the sidecar, so it can be aligned with the probe")]
    NoTimeBase { file: PathBuf },
    #[error("{file}: {0}", file = .1.display())]
    Series(wattflip_energy::AnalysisError, PathBuf),
    #[error("{file}: the trace's clock rate is off ({estimate}); a CSV's time column cannot be rescaled: fix the export's time base, or convert it to raw f32 with a sidecar")]
    CsvRate { file: PathBuf, estimate: String },
}

/// Window the trace is decimated to before analysis: 1 ms, the paper's time resolution.
pub const WINDOW: Nanos = Nanos(1_000_000);

/// The trace as 1 ms windows, its summary, and the file as a source of its samples (second pass).
pub type Imported = (PowerSeries, TraceSummary, Box<dyn FineSamples>);

pub fn import(file: &Path, csv: &CsvCircuit) -> Result<Imported, ImportError> {
    import_with(file, csv, &[])
}

/// [`import`] with the trace's time base corrected by `align`, in order (`trace import --align
/// auto`, each estimate made on the trace as corrected by the ones before it): a raw trace gets
/// the corrected first-sample time and sample rate; a CSV the corrected time origin (its rate
/// cannot be corrected: a CSV whose rate error is beyond the bound is refused).
pub fn import_corrected(file: &Path, csv: &CsvCircuit, align: &[Alignment]) -> Result<Imported, ImportError> {
    import_with(file, csv, align)
}

fn import_with(file: &Path, csv: &CsvCircuit, align: &[Alignment]) -> Result<Imported, ImportError> {
    let is_csv = file.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    let (summary, fine): (TraceSummary, Box<dyn FineSamples>) = if is_csv {
        let (Some(r), Some(u)) = (csv.shunt_ohms, csv.supply_volts) else {
            return Err(ImportError::MissingCircuit { file: file.to_owned() });
        };
        let circuit = ShuntCircuit::new(Ohms(r), Volts(u)).map_err(|e| ImportError::Config(e, file.to_owned()))?;
        if let Some(a) = align.iter().find(|a| a.rate_error.abs() > MAX_RATE_ERROR) {
            return Err(ImportError::CsvRate { file: file.to_owned(), estimate: a.describe() });
        }
        let origin = csv.time_origin_ns.map(|o| UnixNanos(align.iter().fold(o as f64, |t, a| a.host_time(t)).round() as i64));
        let opts = CsvOptions { time_unit: csv.time_unit, time_origin: origin, window: WINDOW, ..Default::default() };
        (integrate_csv(file, circuit, &opts)?, Box::new(CsvSamples { path: file.to_owned(), circuit, options: opts }))
    } else {
        let mut sidecar = Sidecar::find_beside(file)?;
        for a in align {
            if let Some(start) = sidecar.start {
                let (start, rate) = a.correct(start, sidecar.sample_rate.0);
                sidecar.start = Some(start);
                sidecar.sample_rate = Hertz(rate);
            }
        }
        (integrate_raw(file, &sidecar, WINDOW)?, Box::new(RawSamples { path: file.to_owned(), sidecar }))
    };
    if summary.start.is_none() {
        return Err(ImportError::NoTimeBase { file: file.to_owned() });
    }
    let series = PowerSeries::from_trace(&summary).map_err(|e| ImportError::Series(e, file.to_owned()))?;
    Ok((series, summary, fine))
}
