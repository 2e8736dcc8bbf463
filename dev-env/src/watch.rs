//! The continuous loop's building blocks: what each component is built from
//! ([`inputs`]), so that a saved file rebuilds exactly the components it
//! feeds.

pub mod inputs;
