// The message stream and the in-process broker of the reliability client.
//
// The stream is a list of orders (order id, account, amount, and, for the
// versioned pattern, the account's version after the order and its balance
// then), delivered at least once: a share of the messages are redeliveries
// of an earlier order, some of them a few messages later, some handed to two
// consumers at the very same moment ("twins": both copies wait for each
// other at a barrier just before their claim).
//
// The broker deals deliveries to the consumer threads like a queue with
// manual acknowledgements: a consumer acks a delivery only once it saw its
// transaction commit; anything else (a rollback, an error, a lost
// connection, a COMMIT whose outcome is unknown) is a nack, and the message
// is delivered again later. The run is over when nothing is queued, delayed
// or in flight.
//
// Locking: one mutex guards the queue, the delayed set, the pending twin
// copy and the ack bookkeeping; a Twin has its own mutex for its barrier.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

namespace reliability
{

using Clock = std::chrono::steady_clock;

struct Order {
	long long id;
	int account;
	int amount;
	long long version;       // the account's version once this order is applied (1, 2, ...)
	long long balance_after; // the account's balance once this order is applied
};

// The rendezvous of the two copies of a twin delivery.
class Twin
{
  public:
	// Blocks until the other copy arrives too, it gave up, or the timeout
	// passes. True if both met.
	bool meet(std::chrono::milliseconds timeout)
	{
		std::unique_lock<std::mutex> lk(m_);
		arrived_++;
		cv_.notify_all();
		cv_.wait_for(lk, timeout, [&] { return arrived_ >= 2 || gone_; });
		return arrived_ >= 2;
	}
	// A copy that will not reach meet() (its connection failed first).
	void leave()
	{
		std::lock_guard<std::mutex> lk(m_);
		gone_ = true;
		cv_.notify_all();
	}
	// Each copy reports when its claim started and its transaction ended.
	// Returns true to the second copy to report if the two overlapped in
	// time (each claim started before the other transaction ended).
	bool report(int copy, Clock::time_point claimed, Clock::time_point ended, bool *last)
	{
		std::lock_guard<std::mutex> lk(m_);
		claimed_[copy] = claimed;
		ended_[copy] = ended;
		*last = ++reports_ == 2;
		return *last && claimed_[0] < ended_[1] && claimed_[1] < ended_[0];
	}

  private:
	std::mutex m_;
	std::condition_variable cv_;
	int arrived_ = 0;
	bool gone_ = false;
	int reports_ = 0;
	Clock::time_point claimed_[2], ended_[2];
};

struct Delivery {
	int order = -1;             // index into the stream's orders
	bool redelivery = false;    // a redelivery in the stream (not the first copy)
	bool requeued = false;      // delivered again after a nack
	std::shared_ptr<Twin> twin; // set on both copies of a twin delivery
	int copy = 0;               // 0 or 1 for twins
};

struct Stream {
	std::vector<Order> orders;
	std::vector<Delivery> messages; // in delivery order; a twin slot is two messages
	long long message_count = 0;
	long long redeliveries = 0;
	long long twins = 0;
};

// orders orders on accounts accounts; redeliver_pct of the messages are
// redeliveries, twin_pct of those handed to two consumers at once, the rest
// 1 to 40 messages after their original (a quarter of them within 3).
inline Stream make_stream(long long orders, int accounts, int redeliver_pct, int twin_pct,
                          std::uint64_t seed)
{
	std::mt19937_64 rng(seed);
	std::uniform_real_distribution<double> u(0.0, 1.0);
	Stream s;
	std::vector<long long> version(accounts + 1, 0), balance(accounts + 1, 0);
	for (long long i = 0; i < orders; i++) {
		Order o;
		o.id = 1000000 + i;
		o.account = 1 + int(rng() % std::uint64_t(accounts));
		o.amount = 1 + int(rng() % 100);
		o.version = ++version[o.account];
		o.balance_after = balance[o.account] += o.amount;
		s.orders.push_back(o);
	}
	// redeliveries / (orders + redeliveries) = redeliver_pct / 100
	long long redeliveries = orders * redeliver_pct / (100 - redeliver_pct);
	std::vector<bool> twinned(orders, false);
	std::multimap<double, Delivery> slots;
	for (long long i = 0; i < orders; i++)
		slots.emplace(double(i), Delivery{int(i), false, false, nullptr, 0});
	for (long long r = 0; r < redeliveries; r++) {
		int o = int(rng() % std::uint64_t(orders));
		if (int(rng() % 100) < twin_pct && !twinned[o]) {
			twinned[o] = true;
			s.twins++;
			continue;
		}
		double gap = 1 + std::floor(std::pow(u(rng), 2) * 40);
		slots.emplace(o + gap - 0.5, Delivery{o, true, false, nullptr, 0});
	}
	for (auto &[pos, d] : slots) {
		(void)pos;
		if (!d.redelivery && twinned[d.order])
			d.twin = std::make_shared<Twin>();
		s.messages.push_back(d);
	}
	s.redeliveries = redeliveries;
	s.message_count = orders + redeliveries;
	return s;
}

class Broker
{
  public:
	explicit Broker(const Stream &s, std::uint64_t seed)
	    : queue_(s.messages.begin(), s.messages.end()), acked_(s.orders.size(), 0), rng_(seed)
	{
	}

	// The next delivery for a consumer; blocks while everything left is
	// delayed or in flight. False when the run is over (or stopped).
	bool next(Delivery *d)
	{
		std::unique_lock<std::mutex> lk(m_);
		for (;;) {
			if (stopped_)
				return false;
			auto now = Clock::now();
			while (!delayed_.empty() && delayed_.begin()->first <= now) {
				queue_.push_front(delayed_.begin()->second);
				delayed_.erase(delayed_.begin());
			}
			if (pending_twin_) {
				*d = *pending_twin_;
				d->copy = 1;
				pending_twin_.reset();
				in_flight_++;
				return true;
			}
			if (!queue_.empty()) {
				*d = queue_.front();
				queue_.pop_front();
				if (d->twin) {
					pending_twin_ = *d;
					cv_.notify_all(); // someone must take the other copy now
				}
				d->copy = 0;
				in_flight_++;
				return true;
			}
			if (delayed_.empty() && in_flight_ == 0) {
				cv_.notify_all();
				return false;
			}
			if (delayed_.empty())
				cv_.wait(lk);
			else
				cv_.wait_until(lk, delayed_.begin()->first);
		}
	}

	// The consumer saw the delivery's transaction commit.
	void ack(const Delivery &d)
	{
		std::lock_guard<std::mutex> lk(m_);
		if (!acked_[d.order]) {
			acked_[d.order] = 1;
			acked_count_++;
		}
		in_flight_--;
		cv_.notify_all();
	}

	// Not acknowledged: deliver it again, after delay (or, with no delay, a
	// few messages from now, as a broker puts a nacked message back).
	void nack(const Delivery &d, std::chrono::milliseconds delay)
	{
		std::lock_guard<std::mutex> lk(m_);
		Delivery again{d.order, true, true, nullptr, 0};
		if (delay.count() > 0) {
			delayed_.emplace(Clock::now() + delay, again);
		} else {
			std::size_t pos = std::min<std::size_t>(queue_.size(), rng_() % 33);
			queue_.insert(queue_.begin() + long(pos), again);
		}
		in_flight_--;
		cv_.notify_all();
	}

	void stop()
	{
		std::lock_guard<std::mutex> lk(m_);
		stopped_ = true;
		cv_.notify_all();
	}

	long long acked_count() const { return acked_count_.load(); }

	std::vector<char> acked() const
	{
		std::lock_guard<std::mutex> lk(m_);
		return acked_;
	}

  private:
	mutable std::mutex m_;
	std::condition_variable cv_;
	std::deque<Delivery> queue_;
	std::multimap<Clock::time_point, Delivery> delayed_;
	std::optional<Delivery> pending_twin_;
	long long in_flight_ = 0;
	bool stopped_ = false;
	std::vector<char> acked_;
	std::atomic<long long> acked_count_{0};
	std::mt19937_64 rng_;
};

} // namespace reliability
