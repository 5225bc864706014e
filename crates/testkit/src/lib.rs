//! The test harness every bloomgate crate's tests share (a dev-dependency
//! only, never published): the `bloomgate` binary built from the sources
//! ([`bin`], [`bg`]), `bloomgate serve` started on free loopback ports and
//! waited for ([`Server`]), small blocking RESP and HTTP clients ([`Resp`],
//! [`http`]), and real Redis servers and clusters ([`redis`]).
//!
//! A test that needs a program the machine may lack (redis-server,
//! redis-cli, redis-py, mounting a tmpfs) skips with a note, unless
//! `BLOOMGATE_REQUIRE_CLIENTS` is set (`scripts/test.sh` sets it): then the
//! missing program fails the test ([`skip`]).

mod bin;
pub mod redis;
mod serve;

pub use bin::{bin, run};
pub use serve::*;
