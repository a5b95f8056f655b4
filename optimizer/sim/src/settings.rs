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

/// The other way: `key=value` for each parameter that differs from its default, joined by `+`
/// (keys in name order), each value written by `write` so that [`settings_map`] reads it back.
pub(crate) fn changed_settings<P: serde::Serialize>(
    params: &P,
    defaults: &P,
    write: impl Fn(&serde_json::Value) -> String,
) -> String {
    let (serde_json::Value::Object(set), serde_json::Value::Object(default)) = (
        serde_json::to_value(params).expect("parameters serialise"),
        serde_json::to_value(defaults).expect("parameters serialise"),
    ) else {
        return String::new();
    };
    set.iter()
        .filter(|(k, v)| default.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}={}", write(v)))
        .collect::<Vec<_>>()
        .join("+")
}
