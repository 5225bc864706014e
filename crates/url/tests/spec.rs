//! Safe Browsing "URLs and Hashing" spec examples, reference-client vectors,
//! and the edge cases bloomgate relies on.

use std::borrow::Cow;

use bloomgate_url::{
    canonical_host, canonical_key, canonicalize, expressions, UrlError, MAX_INPUT_LEN,
};

fn canon(input: &[u8]) -> String {
    match canonicalize(input) {
        Ok(c) => c.into_owned(),
        Err(e) => panic!("{:?}: {e}", String::from_utf8_lossy(input)),
    }
}

/// Every canonicalization example listed in the Safe Browsing spec.
#[test]
fn spec_canonicalization_examples() {
    let cases: &[(&[u8], &str)] = &[
        (b"http://host/%25%32%35", "http://host/%25"),
        (b"http://host/%25%32%35%25%32%35", "http://host/%25%25"),
        (b"http://host/%2525252525252525", "http://host/%25"),
        (b"http://host/asdf%25%32%35asd", "http://host/asdf%25asd"),
        (b"http://host/%%%25%32%35asd%%", "http://host/%25%25%25asd%25%25"),
        (b"http://www.google.com/", "http://www.google.com/"),
        (
            b"http://%31%36%38%2e%31%38%38%2e%39%39%2e%32%36/%2E%73%65%63%75%72%65/%77%77%77%2E%65%62%61%79%2E%63%6F%6D/",
            "http://168.188.99.26/.secure/www.ebay.com/",
        ),
        (
            b"http://195.127.0.11/uploads/%20%20%20%20/.verify/.eBaysecure=updateuserdataxplimnbqmn-xplmvalidateinfoswqpcmlx=hgplmcx/",
            "http://195.127.0.11/uploads/%20%20%20%20/.verify/.eBaysecure=updateuserdataxplimnbqmn-xplmvalidateinfoswqpcmlx=hgplmcx/",
        ),
        (
            b"http://host%23.com/%257Ea%2521b%2540c%2523d%2524e%25f%255E00%252611%252A22%252833%252944_55%252B",
            "http://host%23.com/~a!b@c%23d$e%25f^00&11*22(33)44_55+",
        ),
        (b"http://3279880203/blah", "http://195.127.0.11/blah"),
        (b"http://www.google.com/blah/..", "http://www.google.com/"),
        (b"www.google.com/", "http://www.google.com/"),
        (b"www.google.com", "http://www.google.com/"),
        (b"http://www.evil.com/blah#frag", "http://www.evil.com/blah"),
        (b"http://www.GOOgle.com/", "http://www.google.com/"),
        (b"http://www.google.com.../", "http://www.google.com/"),
        (b"http://www.google.com/foo\tbar\rbaz\n2", "http://www.google.com/foobarbaz2"),
        (b"http://www.google.com/q?", "http://www.google.com/q?"),
        (b"http://www.google.com/q?r?", "http://www.google.com/q?r?"),
        (b"http://www.google.com/q?r?s", "http://www.google.com/q?r?s"),
        (b"http://evil.com/foo#bar#baz", "http://evil.com/foo"),
        (b"http://evil.com/foo;", "http://evil.com/foo;"),
        (b"http://evil.com/foo?bar;", "http://evil.com/foo?bar;"),
        (b"http://\x01\x80.com/", "http://%01%80.com/"),
        (b"http://notrailingslash.com", "http://notrailingslash.com/"),
        (b"http://www.gotaport.com:1234/", "http://www.gotaport.com/"),
        (b"  http://www.google.com/  ", "http://www.google.com/"),
        (b"http:// leadingspace.com/", "http://%20leadingspace.com/"),
        (b"http://%20leadingspace.com/", "http://%20leadingspace.com/"),
        (b"%20leadingspace.com/", "http://%20leadingspace.com/"),
        (b"https://www.securesite.com/", "https://www.securesite.com/"),
        (b"http://host.com/ab%23cd", "http://host.com/ab%23cd"),
        (
            b"http://host.com//twoslashes?more//slashes",
            "http://host.com/twoslashes?more//slashes",
        ),
    ];
    for (input, want) in cases {
        assert_eq!(canon(input), *want, "{:?}", String::from_utf8_lossy(input));
        // The key is the same thing without "scheme://".
        let key = canonical_key(input).unwrap_or_else(|e| panic!("{e}"));
        let sep = want.find("://").map_or(0, |p| p + 3);
        assert_eq!(&*key, &want.as_bytes()[sep..]);
    }
}

/// Vectors from the reference Go client (google/safebrowsing urls_test.go)
/// that agree with the published rules (that client drops the query; the spec
/// keeps it, so query-dropping vectors are omitted).
#[test]
fn reference_client_vectors() {
    let cases: &[(&[u8], &str)] = &[
        (b"ftp://ftp.myfiles.com/", "ftp://ftp.myfiles.com/"),
        (b"http://some%1bhost.com/%1b", "http://some%1Bhost.com/%1B"),
        (
            b"http://www.\xC3\xBCmlat.com/",
            "http://www.xn--mlat-zra.com/",
        ),
        (
            b"http://[2001:470:1:18::114]/",
            "http://[2001:470:1:18::114]/",
        ),
        (b"http%3A%2F%2Fwackyurl.com:80/", "http://wackyurl.com/"),
        (b"http://W!eird<>Ho$^.com/", "http://w!eird<>ho$^.com/"),
        (
            b"http://i.have.way.too.many.dots.com/",
            "http://i.have.way.too.many.dots.com/",
        ),
        (
            b"http://a.com/foo/.././bar/./../foo.html",
            "http://a.com/foo.html",
        ),
        (b"http://a.com//a//b///c////", "http://a.com/a/b/c/"),
        (
            b"http://google.com.:8080/foo.html",
            "http://google.com/foo.html",
        ),
        (
            b"http://google...com/foo.html",
            "http://google.com/foo.html",
        ),
        (
            b"http://..google.com/foo.html",
            "http://google.com/foo.html",
        ),
        (b"http://0x12.0x43.0x44.0x01", "http://18.67.68.1/"),
        (
            b"http://192.168.0.1:80/index.html",
            "http://192.168.0.1/index.html",
        ),
        (
            b"http://[FEDC:BA98:7654:3210:FEDC:BA98:7654:3210]:80/index.html",
            "http://[fedc:ba98:7654:3210:fedc:ba98:7654:3210]/index.html",
        ),
        (
            b"www.google.com:8080/foo.html",
            "http://www.google.com/foo.html",
        ),
        (b"www.google.com:80", "http://www.google.com/"),
    ];
    for (input, want) in cases {
        assert_eq!(canon(input), *want, "{:?}", String::from_utf8_lossy(input));
    }
}

#[test]
fn ipv4_forms() {
    for (input, want) in [
        ("http://0300.0250.0.1/", "http://192.168.0.1/"),
        ("http://0xc0.0xa8.0.1/", "http://192.168.0.1/"),
        ("http://3279880203/", "http://195.127.0.11/"),
        ("http://1.2/", "http://1.0.0.2/"),
        ("http://1.2.3/", "http://1.2.0.3/"),
        ("http://192.168.0.1./", "http://192.168.0.1/"),
        // Look-alikes that are not legal encodings stay host names.
        ("http://1.2.3.256/", "http://1.2.3.256/"),
        ("http://0308.0250.00.01/", "http://0308.0250.00.01/"),
        ("http://1.2.3.4.5/", "http://1.2.3.4.5/"),
        ("http://192.168.9.com/", "http://192.168.9.com/"),
    ] {
        assert_eq!(canon(input.as_bytes()), want, "{input}");
    }
}

#[test]
fn ipv6_v5_rules() {
    for (input, want) in [
        ("http://[2001:DB8::1]:8080/", "http://[2001:db8::1]/"),
        ("http://[2001:0db8:0000::1]/", "http://[2001:db8::1]/"),
        ("http://[::ffff:1.2.3.4]/x", "http://1.2.3.4/x"),
        ("http://[64:ff9b::1.2.3.4]/", "http://1.2.3.4/"),
        ("http://[1:0:0:2::3:0]/", "http://[1::2:0:0:3:0]/"),
        ("http://user:pw@[::1]:99/", "http://[::1]/"),
        (
            "[2001:470:1:18::114]/a/b",
            "http://[2001:470:1:18::114]/a/b",
        ),
    ] {
        assert_eq!(canon(input.as_bytes()), want, "{input}");
    }
    for bad in [
        &b"http://[::g]/"[..],
        b"http://[2001:db8::1/",
        b"http://[]/",
        b"http://[1.2.3.4]/",
        b"http://[::1]x/",
    ] {
        assert!(
            canonicalize(bad).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    assert!(matches!(
        canonicalize(b"http://[::g]/"),
        Err(UrlError::InvalidIpv6(_))
    ));
}

#[test]
fn idn() {
    assert_eq!(
        canon("http://Bücher.example/".as_bytes()),
        "http://xn--bcher-kva.example/"
    );
    assert_eq!(
        canon(b"http://B%C3%BCcher.example/"),
        "http://xn--bcher-kva.example/"
    );
    assert_eq!(
        canonical_host("Bücher.example".as_bytes()).as_deref(),
        Ok("xn--bcher-kva.example")
    );
    assert_eq!(
        canon("http://xn--bcher-kva.example/".as_bytes()),
        "http://xn--bcher-kva.example/"
    );
}

#[test]
fn schemes_userinfo_ports() {
    assert_eq!(canon(b"HtTpS://Example.com/"), "https://example.com/");
    assert_eq!(
        canon(b"http://user:pass@example.com:8080/p"),
        "http://example.com/p"
    );
    assert_eq!(canon(b"http://a@b@example.com/"), "http://example.com/");
    assert_eq!(canon(b"http://example.com:/"), "http://example.com/");
    assert_eq!(canon(b"http://example.com?q=1"), "http://example.com/?q=1");
    assert_eq!(canon(b"http:/example.com/x"), "http://example.com/x");
    assert_eq!(canon(b"HTTPS:example.com"), "https://example.com/");
    assert_eq!(
        canonicalize(b"http:////example.com/"),
        Err(UrlError::MissingHost)
    );
    // Only http(s) get that leniency; "localhost:8080" is a host and a port.
    assert_eq!(canon(b"localhost:8080/x"), "http://localhost/x");
    assert_eq!(
        &*canonical_key(b"ftp://Files.example/x").unwrap_or_default(),
        b"files.example/x"
    );
    assert!(matches!(
        canonicalize(b"http://example.com:99999/"),
        Err(UrlError::InvalidPort)
    ));
    assert!(matches!(
        canonicalize(b"http://example.com:http/"),
        Err(UrlError::InvalidPort)
    ));
}

#[test]
fn invalid_inputs() {
    assert_eq!(canonicalize(b""), Err(UrlError::Empty));
    assert_eq!(canonicalize(b"   "), Err(UrlError::Empty));
    assert_eq!(canonicalize(b"\t\r\n"), Err(UrlError::Empty));
    assert_eq!(canonicalize(b"http:///path"), Err(UrlError::MissingHost));
    assert_eq!(canonicalize(b"http://.../"), Err(UrlError::MissingHost));
    for no_host in [
        ":",
        "/blah",
        "#ref",
        "/blah#ref",
        "?query#ref",
        "/blah?query#ref",
        "/blah;param",
        "http://#ref",
        "http:///blah#ref",
        "http://?query#ref",
        "http:///blah?query#ref",
        "http:///blah;param",
        "http:///blah;param?query#ref",
        "http://user@/x",
    ] {
        assert!(canonicalize(no_host.as_bytes()).is_err(), "{no_host}");
        assert!(canonical_key(no_host.as_bytes()).is_err(), "{no_host}");
        assert!(expressions(no_host.as_bytes()).is_err(), "{no_host}");
    }
    let long = vec![b'a'; MAX_INPUT_LEN + 1];
    assert_eq!(
        canonicalize(&long),
        Err(UrlError::TooLong {
            len: MAX_INPUT_LEN + 1,
            max: MAX_INPUT_LEN
        })
    );
    // Invalid UTF-8 in a host: escaped in URLs (spec), rejected for bare hosts.
    assert_eq!(canon(b"http://\xff\xfe.com/"), "http://%FF%FE.com/");
    assert_eq!(
        canonical_host(b"\xff\xfe.com"),
        Err(UrlError::InvalidUtf8Host)
    );
    assert_eq!(
        canonical_host(b"http://\xff.com/"),
        Err(UrlError::InvalidUtf8Host)
    );
    // IDNA failure on a valid-UTF-8 host.
    assert!(canonicalize("http://a\u{ff0f}b.com/".as_bytes()).is_err());
    // Stray ':' or brackets in a host name.
    assert!(canonicalize(b"http://a:b:80/").is_err());
    // Messages are human-readable.
    assert_eq!(UrlError::MissingHost.to_string(), "no host");
    assert_eq!(
        UrlError::InvalidIpv6("malformed address").to_string(),
        "invalid IPv6 address: malformed address"
    );
}

#[test]
fn invalid_percent_escapes_are_not_errors() {
    assert_eq!(canon(b"http://host/%zz%4"), "http://host/%25zz%254");
    assert_eq!(canon(b"http://host/%"), "http://host/%25");
}

#[test]
fn non_ascii_path_bytes_are_escaped() {
    assert_eq!(
        canon("http://a.com/ü?ü".as_bytes()),
        "http://a.com/%C3%BC?%C3%BC"
    );
    assert_eq!(canon(b"http://a.com/\xff"), "http://a.com/%FF");
}

#[test]
fn fast_path_borrows() {
    let k = canonical_key(b"http://www.evil.com/a/c").unwrap_or_default();
    assert!(matches!(k, Cow::Borrowed(b"www.evil.com/a/c")));
    let k = canonical_key(b"www.evil.com/a/c?x=1&y=//z/../").unwrap_or_default();
    assert!(matches!(k, Cow::Borrowed(_)));
    let c = canonicalize(b"https://www.evil.com/").unwrap_or_default();
    assert!(matches!(c, Cow::Borrowed("https://www.evil.com/")));
    // Not canonical: owned.
    let k = canonical_key(b"http://www.evil.com").unwrap_or_default();
    assert!(matches!(k, Cow::Owned(_)));
    assert_eq!(&*k, b"www.evil.com/");
}

#[test]
fn canonical_host_inputs() {
    for (input, want) in [
        ("Example.COM", "example.com"),
        ("..example.com..", "example.com"),
        ("http://user@Example.com:8080/path?q#f", "example.com"),
        ("someone@Example.com", "example.com"),
        ("0x7f.1", "127.0.0.1"),
        ("[::FFFF:7f00:1]", "127.0.0.1"),
        ("[2001:DB8::1]", "[2001:db8::1]"),
        ("  example.com\n", "example.com"),
    ] {
        assert_eq!(
            canonical_host(input.as_bytes()).as_deref(),
            Ok(want),
            "{input}"
        );
    }
    for bad in ["", "  ", "http:///x", "a b.com", "[::g]", "@"] {
        assert!(canonical_host(bad.as_bytes()).is_err(), "{bad}");
    }
}
