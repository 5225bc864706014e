//! Where a Redis filter lives: one address string names the server (or the
//! cluster's seed nodes), the credentials, the database and the filter.
//!
//! ```text
//! redis://[USER[:PASSWORD]@]HOST[:PORT][/DB]/NAME[?OPTIONS]
//! redis+cluster://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT…]/NAME[?OPTIONS]
//! ```
//!
//! The scheme and authority are the `redis` crate's URL convention
//! (`redis://user:password@host:port/db`); the last path segment is the
//! filter's name, and `+cluster` with a comma-separated list of seed nodes
//! selects Redis Cluster (which has only database 0). `USER` and
//! `PASSWORD` may be percent-encoded. A password kept out of the command
//! line (and out of `ps`) comes from a file instead
//! ([`Address::with_password_file`]). Options: `read_from_replicas=yes`
//! (cluster only) lets replicas answer lookups — they may lag their master
//! by the replication delay, so an add acknowledged a moment ago may not
//! be seen yet. `rediss://` (TLS) is recognised and refused: this build of
//! the `redis` crate has no TLS (see `Cargo.toml`).
//!
//! A filter's name is 1 to 200 characters of `A-Z a-z 0-9 . _ - :`: it
//! becomes part of key names, and braces would change their hash tags.

use std::path::Path;

use crate::error::{Error, Result};

/// Default Redis port.
const DEFAULT_PORT: u16 = 6379;
/// Longest filter name.
const MAX_NAME: usize = 200;

/// A parsed Redis filter address.
#[derive(Clone, PartialEq, Eq)]
pub struct Address {
    /// `host:port` of the server, or of each seed node of a cluster.
    pub nodes: Vec<(String, u16)>,
    /// Redis Cluster (`redis+cluster://`) rather than one server.
    pub cluster: bool,
    /// ACL user name, if any.
    pub username: Option<String>,
    /// Password, if any.
    pub password: Option<String>,
    /// Database number (standalone only).
    pub db: i64,
    /// The filter's name.
    pub name: String,
    /// Lookups may be answered by replicas (cluster only).
    pub read_from_replicas: bool,
}

impl std::fmt::Debug for Address {
    /// Shows everything but the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Address")
            .field("nodes", &self.nodes)
            .field("cluster", &self.cluster)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("db", &self.db)
            .field("name", &self.name)
            .field("read_from_replicas", &self.read_from_replicas)
            .finish()
    }
}

/// True if `s` names a Redis filter rather than a file: it starts with one
/// of this module's schemes.
pub fn is_redis_address(s: &str) -> bool {
    [
        "redis://",
        "redis+cluster://",
        "rediss://",
        "rediss+cluster://",
    ]
    .iter()
    .any(|p| s.len() >= p.len() && s[..p.len()].eq_ignore_ascii_case(p))
}

impl Address {
    /// Parses an address (see the module documentation).
    pub fn parse(s: &str) -> Result<Address> {
        let shown = redact(s);
        let bad = |problem: &str| Error::Address {
            address: shown.clone(),
            problem: problem.to_string(),
        };
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| bad("expected redis://… or redis+cluster://…"))?;
        let cluster = match scheme.to_ascii_lowercase().as_str() {
            "redis" => false,
            "redis+cluster" => true,
            "rediss" | "rediss+cluster" => {
                return Err(Error::Unsupported(format!(
                    "{shown}: TLS (rediss://) is not supported by this build of bloomgate"
                )))
            }
            _ => return Err(bad("the scheme must be redis:// or redis+cluster://")),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("the filter's name is missing (…/NAME)"))?;
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (mut username, mut password) = (None, None);
        if let Some(u) = userinfo {
            let (user, pass) = match u.split_once(':') {
                Some((user, pass)) => (user, Some(pass)),
                None => (u, None),
            };
            if !user.is_empty() {
                username =
                    Some(percent_decode(user).ok_or_else(|| bad("bad %-escape in the user"))?);
            }
            if let Some(p) = pass {
                password =
                    Some(percent_decode(p).ok_or_else(|| bad("bad %-escape in the password"))?);
            }
        }
        let mut nodes = Vec::new();
        for h in hosts.split(',') {
            nodes.push(parse_host(h).map_err(|p| bad(&p))?);
        }
        if !cluster && nodes.len() > 1 {
            return Err(bad(
                "several hosts need redis+cluster:// (a standalone address names one server)",
            ));
        }
        let segments: Vec<&str> = path.split('/').collect();
        let (db, name) = match segments.as_slice() {
            [name] => (0, *name),
            [db, name] => {
                let db: i64 = db
                    .parse()
                    .ok()
                    .filter(|d| *d >= 0)
                    .ok_or_else(|| bad("expected …/DB/NAME with a database number"))?;
                if cluster && db != 0 {
                    return Err(bad("Redis Cluster has only database 0"));
                }
                (db, *name)
            }
            _ => return Err(bad("expected …/NAME or …/DB/NAME")),
        };
        check_name(name).map_err(|p| bad(&p))?;
        let mut read_from_replicas = false;
        for opt in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|o| !o.is_empty())
        {
            let (k, v) = opt.split_once('=').unwrap_or((opt, "yes"));
            match k {
                "read_from_replicas" => {
                    read_from_replicas = match v {
                        "yes" | "true" | "1" => true,
                        "no" | "false" | "0" => false,
                        _ => return Err(bad("read_from_replicas takes yes or no")),
                    };
                    if read_from_replicas && !cluster {
                        return Err(bad("read_from_replicas needs redis+cluster://"));
                    }
                }
                _ => return Err(bad(&format!("unknown option {k:?}"))),
            }
        }
        Ok(Address {
            nodes,
            cluster,
            username,
            password,
            db,
            name: name.to_string(),
            read_from_replicas,
        })
    }

    /// Sets the password from the first line of a file (a trailing newline
    /// is not part of it), replacing one given in the address.
    pub fn with_password_file(mut self, path: &Path) -> Result<Address> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            op: "read the password",
            source,
        })?;
        let line = text.lines().next().unwrap_or("");
        self.password = Some(line.to_string());
        Ok(self)
    }

    /// The server or cluster as `host:port[,host:port…]`, for messages.
    pub fn server(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|(h, p)| match h.contains(':') {
                true => format!("[{h}]:{p}"),
                false => format!("{h}:{p}"),
            })
            .collect();
        hosts.join(",")
    }

    /// The address without its password, as `redis://…/NAME` (for messages).
    pub fn display(&self) -> String {
        let user = match (&self.username, &self.password) {
            (Some(u), _) => format!("{u}@"),
            (None, Some(_)) => ":…@".to_string(),
            (None, None) => String::new(),
        };
        let scheme = if self.cluster {
            "redis+cluster"
        } else {
            "redis"
        };
        let db = if self.db != 0 {
            format!("/{}", self.db)
        } else {
            String::new()
        };
        format!("{scheme}://{user}{}{db}/{}", self.server(), self.name)
    }
}

/// `host[:port]` or `[v6]:port`.
fn parse_host(h: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = h.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("{h:?}: unclosed ["))?;
        match after.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if after.is_empty() => (host, None),
            None => return Err(format!("{h:?} is not host:port")),
        }
    } else {
        match h.split_once(':') {
            Some((host, p)) => (host, Some(p)),
            None => (h, None),
        }
    };
    if host.is_empty() {
        return Err("a host is empty".into());
    }
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{p:?} is not a port"))?,
        None => DEFAULT_PORT,
    };
    Ok((host.to_string(), port))
}

/// Checks a filter name (see the module documentation).
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "the filter's name must be 1 to {MAX_NAME} characters"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')))
    {
        return Err(format!(
            "{c:?} is not allowed in a filter's name (use A-Z a-z 0-9 . _ - :)"
        ));
    }
    Ok(())
}

/// Decodes `%XX` escapes; `None` for a bad escape or invalid UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The address with any password replaced by `…` (for error messages).
fn redact(s: &str) -> String {
    let Some((scheme, rest)) = s.split_once("://") else {
        return s.to_string();
    };
    let end = rest.find('/').unwrap_or(rest.len());
    match rest[..end].rsplit_once('@') {
        Some((user, hosts)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{scheme}://{user}:…@{hosts}{}", &rest[end..])
        }
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standalone_forms() {
        let a = Address::parse("redis://127.0.0.1:7000/urls").unwrap();
        assert_eq!(a.nodes, vec![("127.0.0.1".to_string(), 7000)]);
        assert!(!a.cluster);
        assert_eq!((a.db, a.name.as_str()), (0, "urls"));
        assert_eq!(a.password, None);

        let a = Address::parse("redis://bob:p%40ss@localhost/3/crawl.seen").unwrap();
        assert_eq!(a.nodes, vec![("localhost".to_string(), 6379)]);
        assert_eq!(a.username.as_deref(), Some("bob"));
        assert_eq!(a.password.as_deref(), Some("p@ss"));
        assert_eq!((a.db, a.name.as_str()), (3, "crawl.seen"));
        assert!(!format!("{a:?}").contains("p@ss"));
        assert_eq!(a.display(), "redis://bob@localhost:6379/3/crawl.seen");

        let a = Address::parse("redis://:secret@[::1]:6380/x").unwrap();
        assert_eq!(a.nodes, vec![("::1".to_string(), 6380)]);
        assert_eq!(a.password.as_deref(), Some("secret"));
        assert_eq!(a.username, None);
    }

    #[test]
    fn cluster_forms() {
        let a =
            Address::parse("redis+cluster://h1:7000,h2:7001,h3:7002/urls?read_from_replicas=yes")
                .unwrap();
        assert!(a.cluster && a.read_from_replicas);
        assert_eq!(a.nodes.len(), 3);
        assert_eq!(a.server(), "h1:7000,h2:7001,h3:7002");
        assert_eq!(a.name, "urls");
    }

    #[test]
    fn refused_forms() {
        for bad in [
            "redis://h:1",
            "redis://h:1/",
            "redis://h:1/a/b/c",
            "redis://h:1/x/name",
            "redis://h:0/n",
            "redis://h:99999/n",
            "redis://h1:1,h2:2/n",
            "redis+cluster://h:1/2/n",
            "redis://h:1/n?read_from_replicas=yes",
            "redis://h:1/n{x}",
            "redis://h:1/n?bogus=1",
            "http://h:1/n",
            "redis://u:%zz@h/n",
        ] {
            assert!(
                matches!(Address::parse(bad), Err(Error::Address { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            Address::parse("rediss://h:1/n"),
            Err(Error::Unsupported(_))
        ));
        let e = Address::parse("redis://u:hunter2@h:1/").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn password_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pw");
        std::fs::write(&p, "s3cret\n").unwrap();
        let a = Address::parse("redis://u:old@h/n")
            .unwrap()
            .with_password_file(&p)
            .unwrap();
        assert_eq!(a.password.as_deref(), Some("s3cret"));
    }

    #[test]
    fn scheme_detection() {
        assert!(is_redis_address("redis://h/n"));
        assert!(is_redis_address("REDIS+CLUSTER://h:1/n"));
        assert!(!is_redis_address("redis.bgf"));
        assert!(!is_redis_address("./redis:/x"));
    }
}
