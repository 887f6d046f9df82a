// idem_client: the C++ consumer of the pg_idem benchmark (bench/run).
//
//   idem_client run --mode redis|sql --sql FILE --threads N --seconds T
//                   --base B [--redeliver-pct 20] [--scope S] [--conninfo STR]
//                   [--redis-host 127.0.0.1] [--redis-port 6379]
//   idem_client dump [--redis-host H] [--redis-port P] [--prefix idem:]
//
// run: N threads, each with its own PostgreSQL connection (and, in mode
// redis, its own Redis connection), loop over messages for T seconds and
// print the rate. The message stream is the one of bench/patterns/_msg.sql:
// thread t's n-th new message is order k = B + n*N + t; with probability
// redeliver-pct/100 a message is instead a redelivery of one of the thread's
// own earlier orders. Order k adds (k % 10 + 1) points to user
// ((k % 10007) * 7919 % 10000 + 1).
//
// The statement in FILE is prepared once per connection; its parameters are,
// by position, $1 user id, $2 points, $3 key (the order id as text), $4 scope,
// and it may use a prefix of them ($1, $2 only, say).
//
//   mode sql:   the statement is the whole consumer (one round trip).
//   mode redis: SET idem:<k> IN_PROGRESS NX EX 60; if not set, a duplicate:
//               skip. Else run the statement (the business UPDATE) in its own
//               transaction, then SETEX idem:<k> 86400 SUCCESS.
//
// dump: prints "key<TAB>value" for every Redis key starting with the prefix
// (for the exactly-once check of mode redis).
#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include <atomic>
#include <cstdarg>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace
{

struct Options {
	std::string command;
	std::string mode;
	std::string sql_file;
	std::string conninfo;
	std::string scope = "cpp";
	std::string redis_host = "127.0.0.1";
	int redis_port = 6379;
	std::string prefix = "idem:";
	int threads = 8;
	double seconds = 10;
	long long base = 0;
	int redeliver_pct = 20;
};

[[noreturn]] void die(const std::string &msg)
{
	std::fprintf(stderr, "idem_client: %s\n", msg.c_str());
	std::fflush(stderr);
	std::_Exit(1);
}

Options parse(int argc, char **argv)
{
	if (argc < 2)
		die("usage: idem_client run|dump [--option value]... (see the source)");
	Options o;
	o.command = argv[1];
	std::map<std::string, std::string> kv;
	for (int i = 2; i < argc; i++) {
		std::string a = argv[i];
		if (a.rfind("--", 0) != 0 || i + 1 >= argc)
			die("bad argument " + a);
		kv[a.substr(2)] = argv[++i];
	}
	for (auto &[k, v] : kv) {
		if (k == "mode")
			o.mode = v;
		else if (k == "sql")
			o.sql_file = v;
		else if (k == "conninfo")
			o.conninfo = v;
		else if (k == "scope")
			o.scope = v;
		else if (k == "redis-host")
			o.redis_host = v;
		else if (k == "redis-port")
			o.redis_port = std::atoi(v.c_str());
		else if (k == "prefix")
			o.prefix = v;
		else if (k == "threads")
			o.threads = std::atoi(v.c_str());
		else if (k == "seconds")
			o.seconds = std::atof(v.c_str());
		else if (k == "base")
			o.base = std::atoll(v.c_str());
		else if (k == "redeliver-pct")
			o.redeliver_pct = std::atoi(v.c_str());
		else
			die("unknown option --" + k);
	}
	return o;
}

redisContext *redis_connect(const Options &o)
{
	redisContext *c = redisConnect(o.redis_host.c_str(), o.redis_port);
	if (c == nullptr || c->err)
		die(std::string("redis connect: ") + (c ? c->errstr : "out of memory"));
	return c;
}

redisReply *redis_cmd(redisContext *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	void *r = redisvCommand(c, fmt, ap);
	va_end(ap);
	if (r == nullptr)
		die(std::string("redis: ") + c->errstr);
	redisReply *reply = static_cast<redisReply *>(r);
	if (reply->type == REDIS_REPLY_ERROR)
		die(std::string("redis: ") + reply->str);
	return reply;
}

struct Counts {
	long long messages = 0;
	long long fresh = 0;   // new orders
	long long skipped = 0; // redis mode: SET NX said duplicate
};

struct Shared {
	const Options *o;
	std::string sql;
	std::atomic<int> ready{0};
	std::atomic<bool> go{false};
	std::chrono::steady_clock::time_point start, deadline;
};

void worker(Shared *sh, int tid, Counts *out)
{
	const Options &o = *sh->o;
	PGconn *pg = PQconnectdb(o.conninfo.c_str());
	if (PQstatus(pg) != CONNECTION_OK)
		die(std::string("connect: ") + PQerrorMessage(pg));
	PGresult *res = PQprepare(pg, "msg", sh->sql.c_str(), 0, nullptr);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die(std::string("prepare: ") + PQerrorMessage(pg));
	PQclear(res);
	res = PQdescribePrepared(pg, "msg");
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die(std::string("describe: ") + PQerrorMessage(pg));
	int nparams = PQnparams(res);
	PQclear(res);
	if (nparams < 1 || nparams > 4)
		die("the statement must use parameters $1..$n, n in 1..4");

	redisContext *rc = o.mode == "redis" ? redis_connect(o) : nullptr;

	std::mt19937_64 rng(std::uint64_t(o.base) * 7919 + std::uint64_t(tid) * 104729 + 1);
	long long nnew = 0;
	Counts c;

	sh->ready++;
	while (!sh->go.load())
		std::this_thread::yield();

	char user[24], points[24], key[24];
	const char *values[4] = {user, points, key, o.scope.c_str()};
	while (std::chrono::steady_clock::now() < sh->deadline) {
		long long seq;
		bool redelivery = nnew > 0 && int(rng() % 100) < o.redeliver_pct;
		if (redelivery)
			seq = (long long)(rng() % std::uint64_t(nnew));
		else
			seq = nnew++;
		long long k = o.base + seq * o.threads + tid;
		std::snprintf(user, sizeof user, "%lld", (k % 10007) * 7919 % 10000 + 1);
		std::snprintf(points, sizeof points, "%lld", k % 10 + 1);
		std::snprintf(key, sizeof key, "%lld", k);
		c.messages++;
		if (!redelivery)
			c.fresh++;

		if (rc != nullptr) {
			redisReply *r = redis_cmd(rc, "SET %s%s IN_PROGRESS NX EX 60", o.prefix.c_str(), key);
			bool claimed = r->type != REDIS_REPLY_NIL;
			freeReplyObject(r);
			if (!claimed) {
				c.skipped++;
				continue;
			}
		}
		res = PQexecPrepared(pg, "msg", nparams, values, nullptr, nullptr, 0);
		ExecStatusType st = PQresultStatus(res);
		if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
			die(std::string("execute: ") + PQerrorMessage(pg));
		PQclear(res);
		if (rc != nullptr)
			freeReplyObject(redis_cmd(rc, "SETEX %s%s 86400 SUCCESS", o.prefix.c_str(), key));
	}
	*out = c;
	if (rc != nullptr)
		redisFree(rc);
	PQfinish(pg);
}

int run(const Options &o)
{
	if (o.mode != "redis" && o.mode != "sql")
		die("--mode must be redis or sql");
	if (o.threads < 1)
		die("--threads must be positive");
	std::ifstream f(o.sql_file);
	if (!f)
		die("cannot read --sql " + o.sql_file);
	std::stringstream ss;
	ss << f.rdbuf();

	Shared sh;
	sh.o = &o;
	sh.sql = ss.str();
	std::vector<Counts> counts(o.threads);
	std::vector<std::thread> threads;
	for (int t = 0; t < o.threads; t++)
		threads.emplace_back(worker, &sh, t, &counts[t]);
	while (sh.ready.load() < o.threads)
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	sh.start = std::chrono::steady_clock::now();
	sh.deadline = sh.start + std::chrono::microseconds(static_cast<long long>(o.seconds * 1e6));
	sh.go = true;
	for (auto &t : threads)
		t.join();
	double elapsed =
	    std::chrono::duration<double>(std::chrono::steady_clock::now() - sh.start).count();

	Counts total;
	for (auto &c : counts) {
		total.messages += c.messages;
		total.fresh += c.fresh;
		total.skipped += c.skipped;
	}
	std::printf("mode = %s\nthreads = %d\nseconds = %.3f\nmessages = %lld\nnew = %lld\n"
	            "redelivered = %lld\nredis_skipped = %lld\n",
	            o.mode.c_str(), o.threads, elapsed, total.messages, total.fresh,
	            total.messages - total.fresh, total.skipped);
	std::printf("messages_per_second = %.1f\n", total.messages / elapsed);
	return 0;
}

int dump(const Options &o)
{
	redisContext *c = redis_connect(o);
	std::string pattern = o.prefix + "*";
	std::string cursor = "0";
	do {
		redisReply *r =
		    redis_cmd(c, "SCAN %s MATCH %s COUNT 1000", cursor.c_str(), pattern.c_str());
		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
			die("unexpected SCAN reply");
		cursor = r->element[0]->str;
		redisReply *keys = r->element[1];
		if (keys->elements > 0) {
			std::vector<const char *> argv{"MGET"};
			std::vector<size_t> lens{4};
			for (size_t i = 0; i < keys->elements; i++) {
				argv.push_back(keys->element[i]->str);
				lens.push_back(keys->element[i]->len);
			}
			void *vr = redisCommandArgv(c, int(argv.size()), argv.data(), lens.data());
			if (vr == nullptr)
				die(std::string("redis: ") + c->errstr);
			redisReply *vals = static_cast<redisReply *>(vr);
			for (size_t i = 0; i < keys->elements; i++) {
				redisReply *v = vals->element[i];
				std::printf("%s\t%s\n", keys->element[i]->str,
				            v->type == REDIS_REPLY_STRING ? v->str : "\\N");
			}
			freeReplyObject(vals);
		}
		freeReplyObject(r);
	} while (cursor != "0");
	redisFree(c);
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	Options o = parse(argc, argv);
	if (o.command == "run")
		return run(o);
	if (o.command == "dump")
		return dump(o);
	die("unknown command " + o.command);
}
