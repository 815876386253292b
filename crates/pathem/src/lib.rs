//! The parts of the command line that other tools reuse: the impairment flags and TOML keys
//! of one direction ([`spec`]) and the config file ([`config`]). The binary (`main.rs`) parses
//! arguments, calls the library crates and prints; the fuzz targets parse configs through this.

pub mod config;
pub mod schedule;
pub mod spec;
