//! The arguments of `bloomgate squid-helper` (the helper itself is
//! `cmd::squid`, over `bloomgate_squid`).

use clap::Args;

/// `bloomgate squid-helper`.
#[derive(Args, Debug)]
pub struct SquidHelperArgs {
    /// The lists to answer from, each `[CATEGORY=]ADDRESS` (a filter file of
    /// any layout, a served data directory's file, or a
    /// `redis://`/`redis+cluster://` address); the category defaults to the
    /// file's name without `.bgf`. The first list holding a query names the
    /// category in the answer.
    #[arg(required = true, value_name = "[CATEGORY=]LIST")]
    pub lists: Vec<String>,
    /// Squid sends a channel ID before each request (`concurrency=N` with
    /// N > 0 in squid.conf); answers carry it back.
    #[arg(long)]
    pub concurrency: bool,
    /// Speak `url_rewrite_program` instead of `external_acl_type`: a listed
    /// URL is redirected (302) to this block page, `%t` replaced by the
    /// category and `%u` by the URL (percent-encoded), as squidGuard's
    /// `redirect`.
    #[arg(long, value_name = "URL")]
    pub redirect: Option<String>,
}
