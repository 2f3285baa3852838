#include "core/settings.hpp"

#include "core/env.hpp"
#include "core/log.hpp"


namespace chorus {

namespace {
std::string takes(const Setting& s) {
  switch (s.kind) {
    case SettingKind::text: return "text";
    case SettingKind::flag: return "0 or 1";
    case SettingKind::number: return std::to_string(s.min) + " to " + std::to_string(s.max);
  }
  return {};
}

// What is wrong with `text` as a value of the number or flag `s`.
std::string problem_of(const Setting& s, const std::string& text) {
  return std::string(s.name) + "='" + text + "' is not " +
         (s.kind == SettingKind::flag ? std::string("0 or 1") : "a whole number from " + takes(s));
}

// The problem with `text` as a value of `s`: empty when it is one.
std::string problem(const Setting& s, const std::string& text) {
  if (s.kind == SettingKind::text || whole_number(text, s.min, s.max)) return {};
  return problem_of(s, text);
}
} // namespace

const Setting* find_setting(std::string_view name) {
  for (const Setting& s : settings())
    if (name == s.name) return &s;
  return nullptr;
}

std::optional<std::string> setting_text(SettingId id) { return env_text(setting(id).name); }

std::string setting_problem(SettingId id) {
  auto text = setting_text(id);
  return text ? problem(setting(id), *text) : std::string();
}

Result<std::optional<uint64_t>> setting_number(SettingId id) {
  if (setting(id).kind == SettingKind::text)
    return Status(Errc::internal, std::string(setting(id).name) + " is text, not a number");
  auto text = setting_text(id);
  if (!text) return std::optional<uint64_t>{};
  auto v = whole_number(*text, setting(id).min, setting(id).max);
  if (!v) return Status(Errc::invalid_config, problem_of(setting(id), *text));
  return std::optional<uint64_t>{*v};
}

uint64_t tuned_number(SettingId id) {
  const Setting& s = setting(id);
  auto v = setting_number(id);
  if (!v) {
    CHORUS_LOG(warn, init, LogWhere{}, v.status().message() + ": " + std::to_string(s.fallback) + " instead");
    return s.fallback;
  }
  return v->value_or(s.fallback);
}

namespace {
const char* reader_header(SettingReader r) {
  return r == SettingReader::from_env ? "| variable | default | takes | meaning |\n| --- | --- | --- | --- |\n"
                                      : "| variable | default | takes | meaning | read in |\n| --- | --- | --- | --- | --- |\n";
}
} // namespace

std::string settings_markdown(SettingReader reader) {
  std::string out = reader_header(reader);
  for (const Setting& s : settings()) {
    if (s.reader != reader) continue;
    out += "| `" + std::string(s.name) + "` | " + s.shown_default + " | " + takes(s) + " | " + s.meaning + " |";
    if (reader != SettingReader::from_env) out += std::string(" ") + s.read_in + " |";
    out += "\n";
  }
  return out;
}

std::string settings_readme_markdown() {
  std::string out = "| variable | default | what |\n| --- | --- | --- |\n";
  for (const Setting& s : settings())
    if (*s.brief) out += "| `" + std::string(s.name) + "` | " + s.shown_default + " | " + s.brief + " |\n";
  return out;
}

std::string settings_report() {
  std::string out;
  for (const Setting& s : settings()) {
    if (s.reader == SettingReader::tests) continue;
    auto text = env_text(s.name);
    // The secret is kept off command lines and out of logs: say only that it is set.
    const bool hidden = s.id == SettingId::secret && text;
    out += std::string(s.name) + " = " + (hidden ? "(set; not shown)" : text ? *text : "(unset)");
    out += std::string("   default: ") + s.shown_default + "; takes: " + takes(s);
    if (text)
      if (auto why = problem(s, *text); !why.empty()) out += "\n  ! " + why;
    out += "\n";
  }
  return out;
}

} // namespace chorus
