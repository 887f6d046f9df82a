// A consumer's libpq connection, reduced to what a consumer decides on: did
// the statement succeed (and with which command tag: a COMMIT of a failed
// transaction succeeds with the tag ROLLBACK), which SQLSTATE if not, and is
// the connection gone (a server crash or restart). Statements with
// parameters are prepared once per connection; a reconnect forgets them.
#pragma once

#include <libpq-fe.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace reliability
{

struct Reply {
	bool ok = false;      // PGRES_COMMAND_OK or PGRES_TUPLES_OK
	bool lost = false;    // the connection is gone; its transaction's fate may be unknown
	std::string sqlstate; // of the error when !ok
	std::string error;
	std::string tag; // command tag: "COMMIT", "ROLLBACK", "SELECT 1", ...
	std::vector<std::vector<std::optional<std::string>>> rows;

	const std::optional<std::string> &value(std::size_t row, std::size_t col) const
	{
		static const std::optional<std::string> none;
		return row < rows.size() && col < rows[row].size() ? rows[row][col] : none;
	}
};

class Connection
{
  public:
	explicit Connection(std::string conninfo) : conninfo_(std::move(conninfo)) {}
	~Connection() { close(); }
	Connection(const Connection &) = delete;
	Connection &operator=(const Connection &) = delete;

	bool connected() const { return conn_ != nullptr; }

	// Connects, retrying until the deadline: the server may be down or in
	// recovery for a while. On failure, *why says the last error.
	bool connect(std::chrono::steady_clock::time_point deadline, std::string *why)
	{
		close();
		for (;;) {
			PGconn *c = start_connection();
			if (PQstatus(c) == CONNECTION_OK) {
				conn_ = c;
				connects_++;
				return true;
			}
			*why = PQerrorMessage(c);
			PQfinish(c);
			if (std::chrono::steady_clock::now() >= deadline)
				return false;
			std::this_thread::sleep_for(std::chrono::milliseconds(50));
		}
	}

	void close()
	{
		if (conn_ != nullptr)
			PQfinish(conn_);
		conn_ = nullptr;
		prepared_.clear();
	}

	long long connects() const { return connects_; }

	// COPY ... FROM STDIN with data (text format). False, with *why, on failure.
	bool copy_in(const std::string &sql, const std::string &data, std::string *why)
	{
		PGresult *res = PQexec(conn_, sql.c_str());
		bool started = PQresultStatus(res) == PGRES_COPY_IN;
		PQclear(res);
		if (!started || PQputCopyData(conn_, data.data(), int(data.size())) != 1 ||
		    PQputCopyEnd(conn_, nullptr) != 1) {
			*why = PQerrorMessage(conn_);
			return false;
		}
		bool ok = true;
		while ((res = PQgetResult(conn_)) != nullptr) {
			if (PQresultStatus(res) != PGRES_COMMAND_OK) {
				ok = false;
				*why = PQerrorMessage(conn_);
			}
			PQclear(res);
		}
		return ok;
	}

	Reply exec(const std::string &sql, const std::vector<std::string> &params = {})
	{
		Reply r;
		if (conn_ == nullptr) {
			r.lost = true;
			r.error = "not connected";
			return r;
		}
		PGresult *res;
		if (params.empty()) {
			res = PQexec(conn_, sql.c_str());
		} else {
			auto it = prepared_.find(sql);
			if (it == prepared_.end()) {
				std::string name = "s" + std::to_string(prepared_.size());
				PGresult *p = PQprepare(conn_, name.c_str(), sql.c_str(), 0, nullptr);
				bool prepared = PQresultStatus(p) == PGRES_COMMAND_OK;
				if (!prepared) {
					fill_error(p, &r);
					PQclear(p);
					return r;
				}
				PQclear(p);
				it = prepared_.emplace(sql, name).first;
			}
			std::vector<const char *> values;
			for (auto &p : params)
				values.push_back(p.c_str());
			res = PQexecPrepared(conn_, it->second.c_str(), int(values.size()), values.data(),
			                     nullptr, nullptr, 0);
		}
		ExecStatusType st = PQresultStatus(res);
		if (res != nullptr && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)) {
			r.ok = true;
			r.tag = PQcmdStatus(res);
			for (int i = 0; i < PQntuples(res); i++) {
				std::vector<std::optional<std::string>> row;
				for (int j = 0; j < PQnfields(res); j++) {
					if (PQgetisnull(res, i, j))
						row.emplace_back();
					else
						row.emplace_back(PQgetvalue(res, i, j));
				}
				r.rows.push_back(std::move(row));
			}
		} else {
			fill_error(res, &r);
		}
		PQclear(res);
		return r;
	}

  private:
	// PQconnectdb, but with the notice processor silenced from the start:
	// a server that is shutting down sends "WARNING: terminating connection
	// due to immediate shutdown command", even to a connection still in its
	// start-up, and here that is expected.
	PGconn *start_connection()
	{
		PGconn *c = PQconnectStart(conninfo_.c_str());
		if (c == nullptr || PQstatus(c) == CONNECTION_BAD)
			return c;
		PQsetNoticeProcessor(
		    c, [](void *, const char *) {}, nullptr);
		auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		PostgresPollingStatusType st = PGRES_POLLING_WRITING;
		while (st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
			int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(
			                   give_up - std::chrono::steady_clock::now())
			                   .count());
			if (left <= 0)
				break;
			pollfd p{PQsocket(c), short(st == PGRES_POLLING_READING ? POLLIN : POLLOUT), 0};
			if (::poll(&p, 1, left) < 0 && errno != EINTR)
				break;
			st = PQconnectPoll(c);
		}
		return c; // CONNECTION_OK, or not (the caller reads PQerrorMessage)
	}

	void fill_error(PGresult *res, Reply *r)
	{
		const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
		r->sqlstate = state ? state : "";
		r->error = PQerrorMessage(conn_);
		// Class 08 (connection exception) and 57P01-57P03 (the server is
		// shutting down, crashed or starting) end the session; so does a
		// result libpq could not read at all.
		// A failure without a SQLSTATE was libpq's own (no reply read).
		bool gone = res == nullptr || r->sqlstate.empty() || PQstatus(conn_) == CONNECTION_BAD ||
		            r->sqlstate.rfind("08", 0) == 0 || r->sqlstate == "57P01" ||
		            r->sqlstate == "57P02" || r->sqlstate == "57P03";
		if (gone) {
			r->lost = true;
			close();
		}
	}

	std::string conninfo_;
	PGconn *conn_ = nullptr;
	std::map<std::string, std::string> prepared_;
	long long connects_ = 0;
};

} // namespace reliability
