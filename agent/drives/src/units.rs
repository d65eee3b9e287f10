//! The drive units, [`Celsius`] and [`Watts`], are `wattflip-units`' (defined once for the
//! workspace); re-exported here so `wattflip_drives::Celsius` keeps working.

pub use wattflip_units::{Celsius, Watts};
