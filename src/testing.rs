//! Shared by the unit tests: how the property tests run.

use proptest::test_runner::{Config, RngSeed};

/// Cases each property runs when `PROPTEST_CASES` does not say otherwise: enough to find the edge
/// cases the generators aim at, few enough for CI.
pub const DEFAULT_CASES: u32 = 256;

/// [`DEFAULT_CASES`] cases (or `PROPTEST_CASES`), drawn from the same fixed random sequence on
/// every run unless `PROPTEST_RNG_SEED` picks another, so CI cannot fail one run in a thousand. A
/// failure prints its shrunk input and writes no file into the tree: such cases become named
/// unit tests.
pub fn proptest_config() -> Config {
    let mut config = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = DEFAULT_CASES;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(0x006d_6e65_6d6f);
    }
    config.failure_persistence = None;
    config
}
