//! Unit tests of the Redis store: addresses, refused credentials, and
//! errors that must never read as "absent".

use super::*;

fn opts(address: &str) -> RedisOptions {
    RedisOptions {
        address: address.into(),
        password_file: None,
        wait_replicas: 0,
        wait_timeout: Duration::from_secs(1),
    }
}

#[test]
fn filter_addresses_are_the_store_address_with_the_name() {
    let a = RedisStore::address_of(&opts("redis://h:1"), "urls").unwrap();
    assert_eq!((a.display(), a.db), ("redis://h:1/urls".to_string(), 0));
    let a = RedisStore::address_of(&opts("redis://:pw@h:1/3/"), "urls").unwrap();
    assert_eq!(
        (a.db, a.name.as_str(), a.password.as_deref()),
        (3, "urls", Some("pw"))
    );
    let a = RedisStore::address_of(&opts("redis+cluster://a:1,b:2?read_from_replicas=yes"), "k")
        .unwrap();
    assert!(a.cluster && a.read_from_replicas);
    assert_eq!((a.nodes.len(), a.name.as_str()), (2, "k"));
    assert!(matches!(
        RedisStore::address_of(&opts("redis://h:1"), "bad{name}"),
        Err(StoreError::BadName(_))
    ));
    assert!(matches!(
        RedisStore::address_of(&opts("redis://h:1/notadb"), "_"),
        Err(StoreError::Invalid(_))
    ));
}

#[test]
fn refused_credentials_are_not_a_retry() {
    let auth = bloomgate_redis::Error::Auth {
        server: "h:1".into(),
        source: redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        )),
    };
    let e = store_err(auth);
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    // Invalid: RESP `ERR …` and HTTP 400, where Unavailable would be
    // TRYAGAIN / 503, which clients retry.
    assert!(e.to_string().contains("authentication failed"), "{e}");
}

#[test]
fn redis_errors_never_read_as_absent() {
    let e = store_err(bloomgate_redis::Error::Protocol {
        server: "h:1".into(),
        problem: "odd reply".into(),
    });
    assert!(matches!(e, StoreError::Unavailable(_)), "{e}");
}
