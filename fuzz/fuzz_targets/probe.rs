#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| pathem_fuzz::probe(data));
