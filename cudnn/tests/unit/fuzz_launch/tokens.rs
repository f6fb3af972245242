//! The token rule of `unit/fuzz_launch` (a module of it): `Token::new`
//! against a model written apart from the crate's.

use cudnn::Error;
use cudnn::nccl::launch::Token;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use super::imp::{call, fail};

/// The token rule, written apart from the crate's: hex of 32 digits or
/// more (a text of hex digits only is hex), or base64 / base64url of 16
/// bytes or more (6 bits a character, padding to a multiple of 4)
/// mixing two of upper case, lower case and digits; 256 bytes at most.
fn token_model(t: &str) -> bool {
    const STD: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    if t.len() > 256 {
        return false;
    }
    if t.chars().all(|c| "0123456789abcdefABCDEF".contains(c)) {
        return t.len() >= 32;
    }
    let body = t.trim_end_matches('=');
    let pad = t.len() - body.len();
    if pad > 2 || (pad > 0 && !t.len().is_multiple_of(4)) || body.len() % 4 == 1 {
        return false;
    }
    if !body.chars().all(|c| STD.contains(c)) && !body.chars().all(|c| URL.contains(c)) {
        return false;
    }
    let kinds = [
        body.chars().any(|c| c.is_ascii_uppercase()),
        body.chars().any(|c| c.is_ascii_lowercase()),
        body.chars().any(|c| c.is_ascii_digit()),
    ];
    body.len() * 6 / 8 >= 16 && kinds.iter().filter(|&&k| k).count() >= 2
}

pub(crate) fn fuzz_tokens(runner: &mut TestRunner) -> Result<(), String> {
    let s = prop_oneof![
        "\\PC{0,8}",
        "\\PC{20,36}",
        "[a-z]{30,34}",
        "[a-z-]{28,36}",
        "[0-9a-fA-F]{28,36}",
        "[A-Za-z0-9+/]{18,30}={0,3}",
        "[A-Za-z0-9_-]{18,30}",
        "[A-Za-z0-9+/_-]{20,30}",
        "[a-z]{250,262}",
        "[0-9a-f]{250,262}",
        Just(String::new()),
        Just("my-training-job-token-for-team-a".to_string()),
    ];
    runner
        .run(&s, |text| {
            let r = call("Token::new", || Token::new(text.clone()))?;
            match r {
                Ok(t) => {
                    if !token_model(&text) {
                        return Err(fail(format!("{text:?} ({} bytes) accepted", text.len())));
                    }
                    if text.len() >= 3
                        && format!("{t:?}").contains(&text)
                        && !"Token(<hidden>)".contains(&text)
                    {
                        return Err(fail(format!("Debug shows {text:?}")));
                    }
                }
                Err(Error::InvalidArgument { arg, value, rule }) if arg == "token" => {
                    if token_model(&text) {
                        return Err(fail(format!("{text:?} refused")));
                    }
                    // The length is counted in bytes, and said so; the
                    // rule is named.
                    if value != format!("{} bytes", text.len()) || !rule.contains("128 bits") {
                        return Err(fail(format!("{text:?}: value {value:?}, rule {rule:?}")));
                    }
                }
                Err(e) => return Err(fail(format!("untyped {e:?}"))),
            }
            Ok(())
        })
        .map_err(|e| e.to_string())
}
