//! The harness of these tests is the `testkit` crate; `mod common;` still
//! names it, for tests written before it existed.
#![allow(unused_imports)]

pub use testkit::*;
