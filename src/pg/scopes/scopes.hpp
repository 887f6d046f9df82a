// Per-scope settings (idem_scopes, written by idem_configure), with the
// pg_idem.default_* parameters filled in where a scope says nothing. Read on
// every claim, so they are cached per backend; idem_configure invalidates
// every backend's cache when it commits. Include after postgres.h.
#pragma once

extern "C" {
#include "datatype/timestamp.h"
}

namespace idem
{

struct ScopeSettings {
	bool has_ttl;
	Interval ttl;
	bool has_lease;
	Interval lease;
	int max_attempts;
	bool mismatch_is_error;
	bool takeover_on_disconnect;
	bool has_reconciler;    // one is configured
	Oid reconcile_function; // it, InvalidOid if no function has its signature
	Oid configured_by;
};

// The settings of `scope` (a validated scope text).
ScopeSettings scope_settings(text *scope);

// now + the record TTL: the call's, else the scope's, else the default.
TimestampTz record_expiry(const char *fn, TimestampTz now, Interval *call_ttl,
                          const ScopeSettings &settings);

// The scope's record TTL, else the default, as an interval: what a record
// that asked for none of its own lives (records keep a claim's own ttl, and
// their statements add COALESCE(ttl, this) to the time of the change).
Interval scope_ttl(const ScopeSettings &settings);

// The longest ttl, lease or wait, in years.
constexpr int max_interval_years = 100;

// The length of `interval`, a month counted as 30 days, as a double (so
// that no value overflows).
double interval_microseconds(const Interval *interval);

// max_interval_years, counted the same way (a year of 12 such months).
constexpr double max_interval_microseconds =
    double(max_interval_years) * MONTHS_PER_YEAR * DAYS_PER_MONTH * USECS_PER_DAY;

// `interval` must be positive and at most max_interval_years; errors name
// `what`.
void check_positive_interval(const char *fn, const char *what, Interval *interval);

// Is `func` still a function (scope text, key text) RETURNS boolean? Checked
// when a scope is configured and again before every call, since the function
// may have been dropped or replaced since.
bool reconcile_function_fits(Oid func);

// May `func` run as `role`? The role must still exist, and the function's
// owner must already have every privilege of the role: the owner can
// replace the function's body at any time, and that body then runs as the
// role. Checked when a scope is configured and again before every call.
bool reconciler_runs_safely_as(Oid func, Oid role);

// After pg_upgrade or a restore into another cluster, the OIDs that
// idem_scopes keeps of reconciliation functions are the old cluster's, and
// each function is found by its signature until this binds it to its OID
// here (from then on, one dropped and replaced by another of the same name
// is refused). Cheap when every function is bound. Needs SPI, as the owner
// of idem_scopes.
struct ExtensionObjects;
void bind_reconcile_functions_here(const ExtensionObjects &objects);

void scopes_register_callbacks();

} // namespace idem
