//! Policy parameters as written on a command line (`--policies portfolio:every_h=6+draws=2`), read
//! in one place for every policy and the portfolio.

/// Parameters written `key=value+key=value` (values as JSON, else as strings; `+` because
/// `--policies` is comma-separated), as the JSON object a policy's parameters are read from.
pub(crate) fn settings_map(
    settings: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let mut params = serde_json::Map::new();
    for setting in settings.split('+').filter(|s| !s.trim().is_empty()) {
        let Some((key, raw)) = setting.split_once('=') else {
            return Err(format!("'{setting}': parameters are key=value"));
        };
        let value = serde_json::from_str(raw.trim())
            .unwrap_or_else(|_| serde_json::Value::String(raw.trim().to_string()));
        params.insert(key.trim().to_string(), value);
    }
    Ok(params)
}
