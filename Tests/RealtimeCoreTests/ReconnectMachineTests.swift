import NIOConcurrencyHelpers
import RealtimeCore
import Testing

/// The reconnect rules without sockets or clocks: times are offsets the test passes in.
@Suite struct ReconnectMachineTests {
    static func machine(_ backoff: BackoffPolicy, stableAfter: Duration = .seconds(5)) -> ReconnectMachine {
        ReconnectMachine(
            policy: ReconnectPolicy(backoff: backoff, reachability: AlwaysReachable(), stableAfter: stableAfter), random: { 0.5 })
    }

    static let drop = SessionEnd.dropped(RealtimeError(.connectionClosed, "dropped"))

    /// Pulls the connect / wait / retry steps out of an action list, as strings.
    static func steps(_ actions: [ReconnectMachine.Action]) -> [String] {
        actions.map { action in
            switch action {
            case .connect(let attempt): "connect \(attempt)"
            case .waitForNetwork(let attempt): "network \(attempt)"
            case .scheduleRetry(let delay, let attempt): "retry \(attempt) after \(delay)"
            case .publish(let state): "state \(state)"
            case .report(let error, let willRetry): "report \(error.code) \(willRetry)"
            case .finished(let error): "finished \(error.map { "\($0.code)" } ?? "nil")"
            }
        }
    }

    @Test func firstConnectThenABackoffPerFailure() {
        var machine = Self.machine(.fixed([.seconds(1), .seconds(2)]))
        #expect(Self.steps(machine.start()) == ["state connecting", "connect 0"])
        #expect(Self.steps(machine.ended(Self.drop, now: .zero)) == ["report connectionClosed true", "state reconnecting(attempt: 1)", "network 1"])
        #expect(Self.steps(machine.networkReachable()) == ["retry 1 after 1.0 seconds"])
        #expect(Self.steps(machine.retryDue()) == ["connect 1"])
        #expect(Self.steps(machine.ended(Self.drop, now: .seconds(1))).last == "network 2")
        #expect(Self.steps(machine.networkReachable()) == ["retry 2 after 2.0 seconds"])
        #expect(Self.steps(machine.retryDue()) == ["connect 2"])
        #expect(Self.steps(machine.ended(Self.drop, now: .seconds(3))) == [
            "report connectionClosed false", "state disconnected(reconnectGaveUp)", "finished reconnectGaveUp",
        ])
        #expect(machine.phase == .stopped)
    }

    /// A connection that opens and drops at once is a failed attempt: the policy's limit holds.
    @Test func anUnstableConnectionCountsAsAFailedAttempt() {
        var machine = Self.machine(.exponential(initial: .seconds(1), randomizationFactor: 0, maxAttempts: 3))
        _ = machine.start()
        var now = Duration.zero
        var last: [String] = []
        for _ in 0..<10 {
            _ = machine.opened(now: now)
            now += .milliseconds(100)
            last = Self.steps(machine.ended(Self.drop, now: now))
            guard machine.phase != .stopped else { break }
            _ = machine.networkReachable()
            _ = machine.retryDue()
        }
        #expect(last.last == "finished reconnectGaveUp")
        #expect(machine.failedAttempts == 4, "three retries, then the fourth failure gives up")
    }

    /// Staying open for stableAfter, or carrying a message, resets the count.
    @Test func aStableConnectionResetsTheCount() {
        var machine = Self.machine(.exponential(initial: .seconds(1), randomizationFactor: 0, maxAttempts: 1))
        _ = machine.start()
        for round in 0..<5 {
            let opened = Duration.seconds(100 * round)
            _ = machine.opened(now: opened)
            if round % 2 == 0 { machine.progressed() }
            let end = round % 2 == 0 ? opened + .milliseconds(10) : opened + .seconds(6)
            #expect(Self.steps(machine.ended(Self.drop, now: end)).contains("network 1"), "round \(round)")
            _ = machine.networkReachable()
            _ = machine.retryDue()
        }
    }

    @Test func aNonRetryableErrorStopsAtOnce() {
        var machine = Self.machine(.exponential())
        _ = machine.start()
        let end = SessionEnd.dropped(RealtimeError(.certificatePinMismatch, "pin"))
        #expect(Self.steps(machine.ended(end, now: .zero)) == [
            "report certificatePinMismatch false", "state disconnected(certificatePinMismatch)", "finished certificatePinMismatch",
        ])
    }

    @Test func aMinimumDelayRaisesTheBackoff() {
        var machine = Self.machine(.fixed([.seconds(1)]))
        _ = machine.start()
        _ = machine.ended(.dropped(nil, minimumDelay: .seconds(7)), now: .zero)
        #expect(Self.steps(machine.networkReachable()) == ["retry 1 after 7.0 seconds"])
    }

    @Test func restartAndStop() {
        var machine = Self.machine(.fixed([]))
        _ = machine.start()
        _ = machine.opened(now: .zero)
        #expect(Self.steps(machine.ended(.restart, now: .seconds(1))) == ["state reconnecting(attempt: 0)", "connect 0"])
        _ = machine.opened(now: .seconds(1))
        #expect(Self.steps(machine.stop()) == ["state disconnected", "finished nil"])
        #expect(machine.ended(Self.drop, now: .seconds(2)).isEmpty, "after stop nothing happens")
    }

    @Test("ConnectionStability: stable after stableAfter open or after a message; nothing open is not stable")
    func stabilityRule() {
        var stability = ConnectionStability()
        // (The macro takes its operand immutably: each mutating call is made first.)
        let nothingOpen = stability.ended(now: .seconds(10), stableAfter: .seconds(5))
        #expect(!nothingOpen, "no connection was open")
        stability.opened(now: .seconds(10))
        let shortLived = stability.ended(now: .seconds(14.9), stableAfter: .seconds(5))
        #expect(!shortLived)
        stability.opened(now: .seconds(20))
        let openLongEnough = stability.ended(now: .seconds(25), stableAfter: .seconds(5))
        #expect(openLongEnough)
        stability.opened(now: .seconds(30))
        stability.progressed()
        let carried = stability.ended(now: .seconds(30.1), stableAfter: .seconds(5))
        #expect(carried)
        // A message before any connection opened proves nothing.
        stability.progressed()
        stability.opened(now: .seconds(40))
        let notCarried = stability.ended(now: .seconds(41), stableAfter: .seconds(5))
        #expect(!notCarried)
    }

    /// A backoff made with `asking` is told the attempt, the time since the drop that began the
    /// attempts (across reconnected connections that did not prove stable) and the last failure.
    @Test func anAskingBackoffIsToldTheAttemptTheTimeAndTheReason() {
        let asked = NIOLockedValueBox<[String]>([])
        var machine = Self.machine(.asking { attempt in
            asked.withLockedValue { $0.append("\(attempt.number) \(attempt.elapsed) \(attempt.reason?.detail ?? "nil")") }
            return attempt.number < 3 ? .seconds(1) : nil
        })
        _ = machine.start()
        _ = machine.opened(now: .seconds(50))
        _ = machine.ended(Self.drop, now: .seconds(100))
        _ = machine.networkReachable()
        _ = machine.retryDue()
        _ = machine.ended(.dropped(RealtimeError(.connectFailed, "refused")), now: .seconds(101))
        _ = machine.networkReachable()
        _ = machine.retryDue()
        _ = machine.opened(now: .seconds(102))
        // Dropped after 1 s without a message: the same run of attempts goes on, and gives up.
        #expect(Self.steps(machine.ended(.dropped(nil), now: .seconds(103))).last == "finished reconnectGaveUp")
        #expect(asked.withLockedValue { $0 } == ["1 0.0 seconds dropped", "2 1.0 seconds refused", "3 3.0 seconds nil"])
        // A later run starts its own time.
        _ = machine.start()
        _ = machine.opened(now: .seconds(200))
        _ = machine.ended(Self.drop, now: .seconds(300))
        #expect(asked.withLockedValue { $0.last } == "1 0.0 seconds dropped")
    }

    /// `failed` ends the run for good with its error, however many attempts the policy allows.
    @Test func aFailedEndStopsWithoutARetry() {
        var machine = Self.machine(.exponential())
        _ = machine.start()
        #expect(Self.steps(machine.ended(.failed(RealtimeError(.refused, "no")), now: .zero)) == [
            "report refused false", "state disconnected(refused)", "finished refused",
        ])
        #expect(machine.phase == .stopped)
    }
}
