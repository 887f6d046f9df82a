// reliability_client: the consumers of test/reliability/run.
//
//   reliability_client --conninfo STR --pattern try_insert|try_insert_row|versioned|claim
//       [--consumers 16] [--orders 4000] [--accounts 400] [--redeliver-pct 30]
//       [--twin-pct 33] [--fault-pct 5] [--seed 1] [--timeout 600]
//       [--crashes K --crash-cmd CMD] [--stats FILE]
//
// Generates the stream (broker.hpp), runs --consumers threads, each with its
// own connection, that take deliveries from the broker and process them with
// the pattern (patterns.cpp), injecting a fault into --fault-pct percent of
// them; acks and nacks go back to the broker until every delivery has been
// acknowledged. With --crashes K, a chaos thread runs CMD (which stops the
// server with `pg_ctl stop -m immediate` and starts it again) K times, when
// 1/(K+1), 2/(K+1), ... of the orders are acknowledged; consumers whose
// connection is lost reconnect and get their unacknowledged deliveries again.
//
// At the end it writes the stream (`stream`) and the ids of the orders a
// consumer acknowledged (`acked`) into the database, for check.sql, and
// prints its counts (and writes them as "name value" lines to --stats).
// The verdict on the balances and records is check.sql's. Exits 1 if a
// consumer met an error that nobody injected, 2 if it could not run, 3 on
// --timeout, 4 if it gave up after kMaxUnexpected such errors (without
// writing results: a broken server or extension must not spin for long).
#include "broker.hpp"
#include "connection.hpp"
#include "patterns.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace reliability;

namespace
{

struct Options {
	std::string conninfo;
	std::string pattern_name;
	Pattern pattern = Pattern::TryInsert;
	int consumers = 16;
	long long orders = 4000;
	int accounts = 400;
	int redeliver_pct = 30;
	int twin_pct = 33;
	double fault_pct = 5;
	std::uint64_t seed = 1;
	double timeout = 600;
	int crashes = 0;
	std::string crash_cmd;
	std::string stats_file;
};

[[noreturn]] void die(const std::string &msg, int code = 2)
{
	std::fprintf(stderr, "reliability_client: %s\n", msg.c_str());
	std::fflush(stderr);
	std::_Exit(code);
}

Options parse(int argc, char **argv)
{
	Options o;
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		if (a.rfind("--", 0) != 0 || i + 1 >= argc)
			die("bad argument " + a + " (see the header of main.cpp)");
		std::string k = a.substr(2), v = argv[++i];
		if (k == "conninfo")
			o.conninfo = v;
		else if (k == "pattern")
			o.pattern_name = v;
		else if (k == "consumers")
			o.consumers = std::atoi(v.c_str());
		else if (k == "orders")
			o.orders = std::atoll(v.c_str());
		else if (k == "accounts")
			o.accounts = std::atoi(v.c_str());
		else if (k == "redeliver-pct")
			o.redeliver_pct = std::atoi(v.c_str());
		else if (k == "twin-pct")
			o.twin_pct = std::atoi(v.c_str());
		else if (k == "fault-pct")
			o.fault_pct = std::atof(v.c_str());
		else if (k == "seed")
			o.seed = std::strtoull(v.c_str(), nullptr, 10);
		else if (k == "timeout")
			o.timeout = std::atof(v.c_str());
		else if (k == "crashes")
			o.crashes = std::atoi(v.c_str());
		else if (k == "crash-cmd")
			o.crash_cmd = v;
		else if (k == "stats")
			o.stats_file = v;
		else
			die("unknown option --" + k);
	}
	if (!parse_pattern(o.pattern_name, &o.pattern))
		die("--pattern must be try_insert, try_insert_row, versioned or claim");
	if (o.consumers < 2 || o.orders < 1 || o.accounts < 1 || o.redeliver_pct < 0 ||
	    o.redeliver_pct >= 100)
		die("bad sizes");
	if (o.crashes > 0 && o.crash_cmd.empty())
		die("--crashes needs --crash-cmd");
	return o;
}

// After this many errors that nobody injected, the run stops.
constexpr long long kMaxUnexpected = 200;

struct Stats {
	std::atomic<long long> deliveries{0}, applied{0}, duplicates{0}, reconnects{0};
	std::atomic<long long> twins_met{0}, twins_missed{0}, twins_overlapped{0}, crashes{0};
	std::atomic<long long> reasons[kReasons] = {};
	std::atomic<long long> faults[kFaults] = {};
	std::mutex m;
	std::map<std::string, long long> unexpected; // by SQLSTATE
	std::vector<std::string> unexpected_samples;
	std::vector<std::atomic<int>> applied_per_order;
	explicit Stats(std::size_t orders) : applied_per_order(orders) {}

	void note_unexpected(const std::string &error)
	{
		std::lock_guard<std::mutex> lk(m);
		unexpected[error.substr(0, error.find(' '))]++;
		if (unexpected_samples.size() < 10)
			unexpected_samples.push_back(error);
	}
};

struct Shared {
	Options o;
	Stream stream;
	Broker broker;
	Stats stats;
	std::vector<Fault> faults;
	std::atomic<bool> finished{false};
	std::atomic<bool> gave_up{false};
	Shared(const Options &opt, Stream s)
	    : o(opt), stream(std::move(s)), broker(stream, opt.seed * 31 + 7),
	      stats(stream.orders.size()), faults(faults_of(opt.pattern))
	{
	}
};

// How long a nacked delivery waits before it is delivered again: a claim
// held by someone else and a version not reached yet need the other
// transaction to finish; anything else goes back into the queue at once.
std::chrono::milliseconds requeue_delay(Reason r)
{
	if (r == kInProgress)
		return std::chrono::milliseconds(100);
	if (r == kNotYet)
		return std::chrono::milliseconds(20);
	return std::chrono::milliseconds(0);
}

void consumer_thread(Shared *sh, int id)
{
	Connection conn(sh->o.conninfo);
	std::mt19937_64 rng(sh->o.seed * 1000003 + std::uint64_t(id));
	Delivery d;
	while (sh->broker.next(&d)) {
		const Order &order = sh->stream.orders[d.order];
		if (!conn.connected()) {
			std::string why;
			if (!conn.connect(Clock::now() + std::chrono::seconds(120), &why))
				die("consumer " + std::to_string(id) + " cannot reconnect: " + why);
			if (conn.connects() > 1)
				sh->stats.reconnects++;
		}
		Fault f = kNoFault;
		if (double(rng() % 1000000) < sh->o.fault_pct * 10000)
			f = sh->faults[rng() % sh->faults.size()];
		bool reached_claim = false;
		Clock::time_point claimed;
		Consumer c{&conn, id, [&] {
			           reached_claim = true;
			           if (d.twin) {
				           if (d.twin->meet(std::chrono::seconds(5)))
					           sh->stats.twins_met++;
				           else
					           sh->stats.twins_missed++;
			           }
			           claimed = Clock::now();
		           }};
		Outcome out = consume(sh->o.pattern, c, order, f);
		if (d.twin) {
			bool last = false;
			if (!reached_claim)
				d.twin->leave();
			else if (d.twin->report(d.copy, claimed, Clock::now(), &last))
				sh->stats.twins_overlapped++;
		}
		sh->stats.deliveries++;
		sh->stats.reasons[out.reason]++;
		if (out.fault_fired)
			sh->stats.faults[f]++;
		if (out.reason == kUnexpected) {
			sh->stats.note_unexpected(out.error);
			if (sh->stats.reasons[kUnexpected] >= kMaxUnexpected) {
				sh->gave_up = true;
				sh->broker.stop();
			}
			std::this_thread::sleep_for(std::chrono::milliseconds(10));
		}
		if (out.acked()) {
			if (out.applied) {
				sh->stats.applied++;
				sh->stats.applied_per_order[d.order]++;
			} else {
				sh->stats.duplicates++;
			}
			sh->broker.ack(d);
		} else {
			sh->broker.nack(d, requeue_delay(out.reason));
		}
	}
}

// Runs the crash command when 1/(K+1), 2/(K+1), ... of the orders are acked.
void chaos_thread(Shared *sh)
{
	for (int k = 1; k <= sh->o.crashes; k++) {
		long long threshold = (long long)(sh->stream.orders.size()) * k / (sh->o.crashes + 1);
		while (sh->broker.acked_count() < threshold && !sh->finished)
			std::this_thread::sleep_for(std::chrono::milliseconds(5));
		if (sh->finished)
			return;
		std::fflush(stdout);
		int rc = std::system(sh->o.crash_cmd.c_str());
		if (rc != 0)
			die("the crash command failed (exit status " + std::to_string(rc) + ")");
		sh->stats.crashes++;
	}
}

void watchdog_thread(Shared *sh)
{
	auto deadline = Clock::now() + std::chrono::milliseconds(long(sh->o.timeout * 1000));
	while (!sh->finished) {
		if (Clock::now() > deadline) {
			std::fprintf(stderr,
			             "reliability_client: timeout after %.0f s with %lld of %zu orders "
			             "acknowledged, %lld deliveries\n",
			             sh->o.timeout, sh->broker.acked_count(), sh->stream.orders.size(),
			             sh->stats.deliveries.load());
			die("giving up", 3);
		}
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
	}
}

// The stream and the acknowledged orders, for check.sql.
void write_results(Shared *sh)
{
	Connection conn(sh->o.conninfo);
	std::string why;
	if (!conn.connect(Clock::now() + std::chrono::seconds(120), &why))
		die("cannot connect to write the results: " + why);
	std::ostringstream stream, acked;
	std::vector<char> is_acked = sh->broker.acked();
	for (std::size_t i = 0; i < sh->stream.orders.size(); i++) {
		const Order &o = sh->stream.orders[i];
		stream << o.id << '\t' << o.account << '\t' << o.amount << '\t' << o.version << '\t'
		       << o.balance_after << '\n';
		if (is_acked[i])
			acked << o.id << '\n';
	}
	if (!conn.copy_in("COPY stream (order_id, account, amount, version, balance_after) "
	                  "FROM STDIN",
	                  stream.str(), &why) ||
	    !conn.copy_in("COPY acked (order_id) FROM STDIN", acked.str(), &why))
		die("writing the results: " + why);
}

void report(Shared *sh, double seconds)
{
	const Options &o = sh->o;
	const Stream &s = sh->stream;
	const Stats &st = sh->stats;
	long long nacked = st.deliveries - st.reasons[kCommitted];
	// Deliveries that got past their claim: not those sent back because
	// another consumer held the key or the version was not reached yet.
	long long processed = st.deliveries - st.reasons[kInProgress] - st.reasons[kNotYet];
	// Every order is acked in the end, and (if all is well) applied by
	// exactly one commit; the consumers saw st.applied of those commits
	// succeed. The others are COMMITs whose connection was lost: committed,
	// though nobody saw it. (Bounded, so that a broken run that lost
	// orders is not reported as unseen commits.)
	long long unseen =
	    std::min((long long)(s.orders.size()) - st.applied, st.reasons[kCommitUnknown].load());
	long long faults = 0, twice = 0;
	for (auto &f : st.faults)
		faults += f;
	for (auto &n : st.applied_per_order)
		twice += n > 1;
	std::vector<std::pair<std::string, double>> kv = {
	    {"orders", double(s.orders.size())},
	    {"messages", double(s.message_count)},
	    {"redeliveries", double(s.redeliveries)},
	    {"twins", double(s.twins)},
	    {"twins_met", double(st.twins_met)},
	    {"twins_overlapped", double(st.twins_overlapped)},
	    {"deliveries", double(st.deliveries)},
	    {"nacked", double(nacked)},
	    {"faults", double(faults)},
	    {"connection_lost", double(st.reasons[kConnectionLost])},
	    {"commit_unknown", double(st.reasons[kCommitUnknown])},
	    {"commit_unknown_committed", double(unseen)},
	    {"in_progress", double(st.reasons[kInProgress])},
	    {"not_yet", double(st.reasons[kNotYet])},
	    {"refused", double(st.reasons[kRefused])},
	    {"unexpected", double(st.reasons[kUnexpected])},
	    {"crashes", double(st.crashes)},
	    {"reconnects", double(st.reconnects)},
	    {"acked_orders", double(sh->broker.acked_count())},
	    {"committed_applied", double(st.applied)},
	    {"committed_duplicates", double(st.duplicates)},
	    {"orders_seen_applied_twice", double(twice)},
	    {"seconds", seconds},
	};
	if (!o.stats_file.empty()) {
		std::ofstream f(o.stats_file);
		for (auto &[k, v] : kv)
			f << k << ' ' << v << '\n';
	}
	std::printf("  stream      %zu orders on %d accounts; %lld messages, %lld of them "
	            "redeliveries (%.1f%%), %lld handed to two consumers at once\n",
	            s.orders.size(), o.accounts, s.message_count, s.redeliveries,
	            100.0 * double(s.redeliveries) / double(s.message_count), s.twins);
	std::printf("  twins       %lld pairs met at the barrier (%lld copies came alone), %lld "
	            "pairs overlapped in time\n",
	            st.twins_met.load() / 2, st.twins_missed.load(), st.twins_overlapped.load());
	std::printf("  deliveries  %lld by %d consumers in %.1f s (%.0f/s); %lld nacked and "
	            "delivered again:\n",
	            st.deliveries.load(), o.consumers, seconds, double(st.deliveries) / seconds,
	            nacked);
	for (int r = 1; r < kReasons; r++)
		if (st.reasons[r] > 0)
			std::printf("                %6lld %s\n", st.reasons[r].load(), kReasonNames[r]);
	std::printf("  faults      %lld injected (%.1f%% of the %lld deliveries that got past "
	            "their claim):\n",
	            faults, 100.0 * double(faults) / double(processed), processed);
	for (int f = 1; f < kFaults; f++)
		if (st.faults[f] > 0)
			std::printf("                %6lld %s\n", st.faults[f].load(), kFaultNames[f]);
	if (o.crashes > 0)
		std::printf("  crashes     %lld (pg_ctl stop -m immediate, restart); %lld reconnects; "
		            "%lld COMMITs with an unknown outcome, %lld of which had committed "
		            "(their redelivery was a duplicate)\n",
		            st.crashes.load(), st.reconnects.load(), st.reasons[kCommitUnknown].load(),
		            unseen);
	std::printf("  acked       %lld of %zu orders; commits seen: %lld applied, %lld "
	            "duplicates; orders seen applied twice: %lld\n",
	            sh->broker.acked_count(), s.orders.size(), st.applied.load(), st.duplicates.load(),
	            twice);
	if (st.reasons[kUnexpected] > 0) {
		std::printf("  UNEXPECTED errors:\n");
		for (auto &[state, n] : st.unexpected)
			std::printf("                %6lld %s\n", n, state.c_str());
		for (auto &e : st.unexpected_samples)
			std::printf("                e.g. %s\n", e.c_str());
	}
	std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv)
{
	Options o = parse(argc, argv);
	Shared sh(o, make_stream(o.orders, o.accounts, o.redeliver_pct, o.twin_pct, o.seed));
	auto start = Clock::now();
	std::thread watchdog(watchdog_thread, &sh);
	std::thread chaos(chaos_thread, &sh);
	std::vector<std::thread> consumers;
	for (int i = 0; i < o.consumers; i++)
		consumers.emplace_back(consumer_thread, &sh, i + 1);
	for (auto &t : consumers)
		t.join();
	double seconds = std::chrono::duration<double>(Clock::now() - start).count();
	sh.finished = true;
	chaos.join();
	watchdog.join();
	if (sh.gave_up) {
		report(&sh, seconds);
		die("gave up after " + std::to_string(kMaxUnexpected) +
		        " errors that nobody injected (see above)",
		    4);
	}
	write_results(&sh);
	report(&sh, seconds);
	return sh.stats.reasons[kUnexpected] > 0 ? 1 : 0;
}
