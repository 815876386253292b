//! pathem's lab: what measures pathem and the machine it runs on, apart from what users run
//! (`pathem run` never links it).
//!
//! - [`testbed`]: the one namespace test bed (gen — mid — sink over veth, or gen — sink);
//! - [`validate`]: the probe through the bed, checked against the path's own models;
//! - [`demo`]: `pathem demo`, a generated capture through a typical path;
//! - [`hiccups`]: how often a busy thread loses its CPU here (the floor of any timing);
//! - [`mod@bench`]: the benchmarks' loops: the engine alone, split over two threads, the ports'
//!   offload work, and live forwarding through the bed next to `dpdk-testpmd`.
//!
//! Every live measurement starts a [`pathem_runtime::Link`], so what is measured is the loop
//! users run.

pub mod bench;
pub mod demo;
pub mod error;
pub mod hiccups;
pub mod rounds;
pub mod testbed;
pub mod validate;

pub use error::Error;
