//! Bearer-token files, read by one rule in the plugin (its token for the optimizer) and the
//! service (the admin and plugin tokens): private to their owner, one token, long enough.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Shortest token accepted: a guessable token is no protection. `cinch serve` makes 64 hex
/// digits.
pub const MIN_TOKEN_LEN: usize = 16;

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("is readable or writable by group/others (mode {mode:03o}); run: chmod 600 {path}")]
    NotPrivate { mode: u32, path: String },
    #[error("is empty")]
    Empty,
    #[error("does not hold a single token (whitespace inside it)")]
    NotSingle,
    #[error("holds a {0}-character token; tokens need at least {MIN_TOKEN_LEN}")]
    Short(usize),
}

/// The token in `path`, refused when others may read or write the file, when it holds no single
/// token, or one shorter than [`MIN_TOKEN_LEN`]. A missing file is [`TokenError::Io`] with
/// `NotFound`, so a caller may create it.
pub fn read_token_file(path: &Path) -> Result<String, TokenError> {
    let meta = std::fs::metadata(path)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(TokenError::NotPrivate {
            mode,
            path: path.display().to_string(),
        });
    }
    let text = std::fs::read_to_string(path)?;
    let token = text.trim();
    if token.is_empty() {
        return Err(TokenError::Empty);
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(TokenError::NotSingle);
    }
    if token.len() < MIN_TOKEN_LEN {
        return Err(TokenError::Short(token.len()));
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token_file(name: &str, text: &str, mode: u32) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("cinch-token-{name}-{}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn tokens_must_be_private_single_and_long_enough() {
        let good = token_file("good", "0123456789abcdef0123\n", 0o600);
        assert_eq!(read_token_file(&good).unwrap(), "0123456789abcdef0123");
        let short = token_file("short", "x\n", 0o600);
        let err = read_token_file(&short).unwrap_err().to_string();
        assert!(err.contains("at least 16"), "{err}");
        let open = token_file("open", "0123456789abcdef0123\n", 0o644);
        let err = read_token_file(&open).unwrap_err().to_string();
        assert!(err.contains("(mode 644); run: chmod 600"), "{err}");
        let two = token_file("two", "0123456789abcdef 0123456789abcdef\n", 0o600);
        let err = read_token_file(&two).unwrap_err().to_string();
        assert!(err.contains("single token"), "{err}");
        let empty = token_file("empty", " \n", 0o600);
        assert!(matches!(read_token_file(&empty), Err(TokenError::Empty)));
        let missing = std::env::temp_dir().join("cinch-token-missing-nowhere");
        assert!(matches!(
            read_token_file(&missing),
            Err(TokenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound
        ));
        for p in [good, short, open, two, empty] {
            std::fs::remove_file(p).unwrap();
        }
    }
}
