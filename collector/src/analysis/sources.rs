//! Cross-source validation per host: where a host measures the same energy at more than one scope
//! (PSU input and output, rails and RAPL under the PSU output, a wall meter over psys), the mean
//! power of each scope over a window is compared, the ratio becomes a `source_agreement` point,
//! and a ratio that leaves its band raises one `source_disagreement` event until it is back.
//!
//! Pure and self-contained: [`Agreement::observe`] takes a host's power samples as the collector
//! validated them and returns [`Finding`]s; the caller writes [`Finding::points`] (the ratio point
//! and, when the band was just left or regained, the event). A scope's power over a window is the sum over its zones
//! of each zone's energy divided by the time that zone's samples cover (joules of counter
//! sources, else watts × interval), so zones read at different rates compare fairly. Full-rate
//! samples repeat the window aggregates and are left out. To add a check, add a [`Band`].

use std::collections::{BTreeSet, HashMap};
use wattflip_proto::domain::PowerSample;
use wattflip_proto::lineproto::Point;
pub use wattflip_proto::schema::SOURCE_AGREEMENT;
use wattflip_proto::schema::{source_agreement_point, HostTags, EVENT};

/// Kind of the event raised when a ratio leaves its band.
pub const SOURCE_DISAGREEMENT: &str = "source_disagreement";

/// One comparison: Σ power of `numerator` scopes / Σ power of `denominator` scopes must lie in
/// `min..=max`. Checked only in windows where every scope of both sides has data.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    pub name: String,
    pub numerator: Vec<String>,
    pub denominator: Vec<String>,
    pub min: f64,
    pub max: f64,
}

impl Band {
    fn new(name: &str, numerator: &[&str], denominator: &[&str], min: f64, max: f64) -> Band {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Band { name: name.into(), numerator: v(numerator), denominator: v(denominator), min, max }
    }

    /// The default checks: PSU efficiency (output over input) within 0.80–0.97 (80 PLUS Bronze to
    /// Titanium at typical loads); rails and RAPL (package + DRAM) within the PSU output
    /// (they are downstream of it: ratio ≤ 1); psys within the wall meter (≤ 1).
    pub fn defaults() -> Vec<Band> {
        vec![
            Band::new("psu_efficiency", &["psu_out"], &["psu_in"], 0.80, 0.97),
            Band::new("rails_rapl_under_psu_out", &["rail", "package", "dram"], &["psu_out"], 0.0, 1.0),
            Band::new("psys_under_wall", &["psys"], &["wall"], 0.0, 1.0),
        ]
    }

    fn scopes(&self) -> impl Iterator<Item = &String> {
        self.numerator.iter().chain(&self.denominator)
    }
}

/// One band's ratio over one window of one host.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub host: String,
    pub band: String,
    pub start_ns: i64,
    pub end_ns: i64,
    pub ratio: f64,
    pub min: f64,
    pub max: f64,
    /// `Some(message)` when the ratio just left its band (warning) or came back (info, `within`).
    pub event: Option<String>,
}

impl Finding {
    pub fn within(&self) -> bool {
        (self.min..=self.max).contains(&self.ratio)
    }

    /// What the collector writes for this finding, with the host's tags (`host` and its labels):
    /// the `source_agreement` point at the window's end (tag `check`; fields ratio, band, within)
    /// and, when [`Finding::event`] is set, an `event` of kind [`SOURCE_DISAGREEMENT`] (warning
    /// when the ratio left its band, info when it is back), tagged by check so a resent batch
    /// overwrites it.
    pub fn points(&self, tags: &HostTags) -> Vec<Point> {
        let base = |measurement: &str| {
            let mut p = Point::new(measurement, self.end_ns).tag("host", tags.host.clone());
            for (k, v) in &tags.labels {
                p = p.tag(k.clone(), v.clone());
            }
            p.tag("check", self.band.clone())
        };
        let mut out = vec![source_agreement_point(tags, self.end_ns, &self.band, self.ratio, (self.min, self.max))];
        if let Some(message) = &self.event {
            out.push(
                base(EVENT)
                    .tag("kind", SOURCE_DISAGREEMENT)
                    .tag("severity", if self.within() { "info" } else { "warning" })
                    .string("message", message.clone())
                    .string("attributes", format!("check={} ratio={:.4} min={} max={}", self.band, self.ratio, self.min, self.max)),
            );
        }
        out
    }
}

#[derive(Debug, Default)]
struct HostWindow {
    start_ns: i64,
    /// (scope, zone, joules, covered seconds); a host has a few dozen zones at most, so a vector
    /// searched by borrowed names costs no allocation per sample.
    zones: Vec<(String, String, f64, f64)>,
}

impl HostWindow {
    fn scope_watts(&self, scope: &str) -> Option<f64> {
        let mut any = false;
        let mut w = 0.0;
        for (s, _, j, secs) in &self.zones {
            if s == scope && *secs > 0.0 {
                any = true;
                w += j / secs;
            }
        }
        any.then_some(w)
    }
}

/// Per-host windows and the bands outside their range, kept between batches.
#[derive(Debug)]
pub struct Agreement {
    window_ns: i64,
    bands: Vec<Band>,
    hosts: HashMap<String, HostWindow>,
    outside: BTreeSet<(String, String)>,
}

impl Agreement {
    /// Windows of `window_ns` (aligned to multiples of it), checking `bands`.
    pub fn new(window_ns: i64, bands: Vec<Band>) -> Agreement {
        Agreement { window_ns: window_ns.max(1), bands, hosts: HashMap::new(), outside: BTreeSet::new() }
    }

    /// Adds a host's samples; returns the findings of every window they closed (a sample in a
    /// later window closes the host's current one). Samples of a closed window are ignored.
    pub fn observe(&mut self, host: &str, samples: &[PowerSample]) -> Vec<Finding> {
        let mut out = Vec::new();
        for s in samples.iter().filter(|s| !s.full_rate) {
            let t = s.time.0;
            let start = t.div_euclid(self.window_ns) * self.window_ns;
            if !self.hosts.contains_key(host) {
                self.hosts.insert(host.to_string(), HostWindow { start_ns: start, ..Default::default() });
            }
            let Some(w) = self.hosts.get_mut(host) else { continue };
            if start < w.start_ns {
                continue;
            }
            if start > w.start_ns {
                let done = std::mem::replace(w, HostWindow { start_ns: start, ..Default::default() });
                out.extend(self.close(host, &done));
            }
            let secs = s.interval_ns as f64 / 1e9;
            let joules = match (s.joules, s.watts) {
                (Some(j), _) => j.0,
                (None, Some(w)) => w.0 * secs,
                (None, None) => continue,
            };
            if secs <= 0.0 {
                continue;
            }
            if let Some(w) = self.hosts.get_mut(host) {
                match w.zones.iter_mut().find(|z| z.0 == s.scope && z.1 == s.zone) {
                    Some(z) => {
                        z.2 += joules;
                        z.3 += secs;
                    }
                    None => w.zones.push((s.scope.clone(), s.zone.clone(), joules, secs)),
                }
            }
        }
        out
    }

    fn close(&mut self, host: &str, w: &HostWindow) -> Vec<Finding> {
        let mut out = Vec::new();
        for b in &self.bands {
            let watts: Option<Vec<f64>> = b.scopes().map(|s| w.scope_watts(s)).collect();
            let Some(watts) = watts else { continue };
            let (num, den): (f64, f64) = (watts[..b.numerator.len()].iter().sum(), watts[b.numerator.len()..].iter().sum());
            if den <= 0.0 {
                continue;
            }
            let mut f = Finding {
                host: host.into(),
                band: b.name.clone(),
                start_ns: w.start_ns,
                end_ns: w.start_ns + self.window_ns,
                ratio: num / den,
                min: b.min,
                max: b.max,
                event: None,
            };
            let key = (host.to_string(), b.name.clone());
            let was_outside = self.outside.contains(&key);
            if !f.within() && !was_outside {
                self.outside.insert(key);
                f.event = Some(format!(
                    "{host}: {} = {:.3} ({} / {}) is outside {:.2}..{:.2}: one of these sources is wrong or a scope is misassigned",
                    b.name,
                    f.ratio,
                    b.numerator.join(" + "),
                    b.denominator.join(" + "),
                    b.min,
                    b.max
                ));
            } else if f.within() && was_outside {
                self.outside.remove(&key);
                f.event = Some(format!("{host}: {} = {:.3} is back within {:.2}..{:.2}", b.name, f.ratio, b.min, b.max));
            }
            out.push(f);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattflip_proto::units::{Joules, UnixNanos, Watts};

    fn sample(t_s: i64, scope: &str, zone: &str, watts: Option<f64>, joules: Option<f64>) -> PowerSample {
        PowerSample {
            time: UnixNanos(t_s * 1_000_000_000),
            source: "hwmon".into(),
            zone: zone.into(),
            scope: scope.into(),
            method: wattflip_proto::domain::Method::Measured,
            watts: watts.map(Watts),
            joules: joules.map(Joules),
            interval_ns: 1_000_000_000,
            min_watts: None,
            max_watts: None,
            readings: 1,
            full_rate: false,
            flags: Vec::new(),
            joules_total: None,
        }
    }

    /// Two PSUs (pin 250 W + 250 W in, pout 220 W + 220 W out: 0.88) in the first minute; in the
    /// second, one PSU's output meter reads 10 % high (242 + 220 over 500 = 0.924, still in band)
    /// and then its input reads half (pout 440 over 375 W in = 1.173): one warning, then an info
    /// when it is back. Energy counters and instantaneous watts mix (zones compare by mean power).
    #[test]
    fn psu_efficiency_per_window_with_one_event_per_episode() {
        let mut a = Agreement::new(60_000_000_000, Band::defaults());
        let minute = |m: i64, pin2: f64, pout1: f64| -> Vec<PowerSample> {
            (0..60)
                .flat_map(|s| {
                    let t = m * 60 + s;
                    [
                        sample(t, "psu_in", "psu1/pin", Some(250.0), None),
                        sample(t, "psu_in", "psu2/pin", None, Some(pin2)),
                        sample(t, "psu_out", "psu1/pout1", Some(pout1), None),
                        sample(t, "psu_out", "psu2/pout1", Some(220.0), None),
                    ]
                })
                .collect()
        };
        assert!(a.observe("h1", &minute(0, 250.0, 220.0)).is_empty(), "the window is not closed yet");
        let f = a.observe("h1", &minute(1, 250.0, 242.0));
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].band.as_str(), f[0].start_ns, f[0].end_ns, f[0].event.is_none()), ("psu_efficiency", 0, 60_000_000_000, true));
        assert!((f[0].ratio - 440.0 / 500.0).abs() < 1e-12, "{}", f[0].ratio);
        let f = a.observe("h1", &minute(2, 125.0, 220.0));
        assert!((f[0].ratio - 462.0 / 500.0).abs() < 1e-12 && f[0].within() && f[0].event.is_none(), "{f:?}");
        let f = a.observe("h1", &minute(3, 125.0, 220.0));
        assert!((f[0].ratio - 440.0 / 375.0).abs() < 1e-12 && !f[0].within(), "{f:?}");
        assert!(f[0].event.as_deref().is_some_and(|e| e.starts_with("h1: psu_efficiency = 1.173 (psu_out / psu_in) is outside 0.80..0.97")), "{f:?}");
        let f = a.observe("h1", &minute(4, 250.0, 220.0));
        assert!(!f[0].within() && f[0].event.is_none(), "still outside: no second event");
        let f = a.observe("h1", &minute(5, 250.0, 220.0));
        assert!(f[0].within() && f[0].event.as_deref() == Some("h1: psu_efficiency = 0.880 is back within 0.80..0.97"), "{f:?}");
        let tags = HostTags { host: "h1".into(), labels: [("rack".to_string(), "r7".to_string())].into() };
        let mut lines = String::new();
        for p in f[0].points(&tags) {
            p.write_line(&mut lines).unwrap();
        }
        assert_eq!(
            lines,
            "source_agreement,check=psu_efficiency,host=h1,rack=r7 ratio=0.88,min=0.8,max=0.97,within=true 300000000000\n\
             event,check=psu_efficiency,host=h1,kind=source_disagreement,rack=r7,severity=info message=\"h1: psu_efficiency = 0.880 is back within 0.80..0.97\",attributes=\"check=psu_efficiency ratio=0.8800 min=0.8 max=0.97\" 300000000000\n"
        );
    }

    /// A band is checked only when every scope of both sides has data; full-rate samples do not
    /// count twice.
    #[test]
    fn bands_without_all_their_scopes_are_not_checked() {
        let mut a = Agreement::new(10_000_000_000, Band::defaults());
        let mut full = sample(1, "psu_in", "psu1/pin", Some(900.0), None);
        full.full_rate = true;
        let first = vec![
            sample(1, "psu_out", "psu1/pout1", Some(180.0), None),
            sample(1, "psu_in", "psu1/pin", Some(200.0), None),
            full,
            sample(2, "rail", "ina/12V", Some(50.0), None),
        ];
        a.observe("h1", &first);
        let f = a.observe("h1", &[sample(11, "psu_in", "psu1/pin", Some(200.0), None)]);
        // psu_efficiency 0.9; rails_rapl_under_psu_out lacks package and dram; psys_under_wall both.
        assert_eq!(f.iter().map(|f| (f.band.as_str(), f.ratio)).collect::<Vec<_>>(), vec![("psu_efficiency", 0.9)]);
    }
}

/// [`Agreement`] sharded by host behind separate locks, like the throttling detector: streams of
/// different hosts never wait for each other.
#[derive(Debug)]
pub struct Sharded {
    shards: Vec<std::sync::Mutex<Agreement>>,
}

impl Sharded {
    pub fn new(window_ns: i64, bands: Vec<Band>) -> Sharded {
        Sharded { shards: (0..crate::analysis::throttle::SHARDS).map(|_| std::sync::Mutex::new(Agreement::new(window_ns, bands.clone()))).collect() }
    }

    pub fn observe(&self, host: &str, samples: &[PowerSample]) -> Vec<Finding> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let i = BuildHasherDefault::<DefaultHasher>::default().hash_one(host) as usize % self.shards.len();
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner()).observe(host, samples)
    }
}

impl Default for Sharded {
    /// One-minute windows with the default bands.
    fn default() -> Self {
        Sharded::new(60_000_000_000, Band::defaults())
    }
}
