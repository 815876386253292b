//! pathem's measurement tool: timestamped UDP traffic through any path, and what the path did
//! to it — delay and its deviation, gaps before and after, losses and their bursts,
//! reordering, duplicates, throughput — as JSON and as the papers' figures.

pub mod analysis;
pub mod error;
pub mod net;
pub mod opts;
pub mod packet;
pub mod pattern;
pub mod plot;
pub mod session;

pub use analysis::{analyse, Sample, Series, Summary};
pub use error::Error;
pub use net::Arrivals;
pub use pattern::{Pattern, Schedule};
