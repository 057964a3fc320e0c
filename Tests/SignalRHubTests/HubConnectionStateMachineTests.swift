import Foundation
import RealtimeCore
@testable import SignalRHub
import RealtimeTesting
import Testing

/// The lifecycle rules, without sockets or clocks: times are offsets given to each input.
///
/// Two values make a hub connection's lifecycle: `HubConnectionStateMachine` (what the app sees,
/// the keep-alive, what the reconnect driver is told) and the `ReconnectMachine` of its
/// `ReconnectDriver` (attempts, delays, giving up), with the retry policy asked through
/// `HubConnection.reconnectPolicy(_:)`. The first suite tests the one, the second the other with a
/// hub connection's policy (`HubConnectionFaultTests` run both on real sockets).
@Suite("HubConnectionStateMachine")
struct HubConnectionStateMachineTests {
    /// Pending calls are their invocation ids here.
    typealias Machine = HubConnectionStateMachine<String>

    static let lost = RealtimeError(.connectionClosed, "lost")

    static func names(_ actions: [Machine.Action]) -> [String] {
        actions.map { action in
            switch action {
            case .connect(let attempt): "connect \(attempt)"
            case .failPending(let calls, let error): "failPending \(error.code)" + (calls.isEmpty ? "" : " \(calls.sorted())")
            case .notifyReconnecting: "reconnecting"
            case .notifyReconnected: "reconnected"
            case .notifyClosed(let error): "closed \(error.map { "\($0.code)" } ?? "nil")"
            case .reportOpened: "opened"
            case .endSession(.closed): "end closed"
            case .endSession(.failed(let error)): "end failed \(error.code)"
            case .endSession(.dropped(let error, _)): "end dropped \(error.map { "\($0.code)" } ?? "nil")"
            case .endSession(.restart): "end restart"
            case .stopReconnecting: "stop driver"
            case .stopResuming: "stop resume"
            case .sendPing: "ping"
            case .abortTransport(let error): "abort \(error.code)"
            case .closeTransport: "close"
            }
        }
    }

    func names(_ actions: [Machine.Action]) -> [String] { Self.names(actions) }

    @Test("Start, connect, stop")
    func startAndStop() throws {
        var machine = Machine(reconnects: false)
        #expect(names(try machine.start()) == ["connect 0"])
        #expect(throws: RealtimeError.self) { try machine.start() }
        #expect(names(machine.connected(now: .zero)) == ["opened"])
        #expect(machine.state == .connected)
        #expect(names(machine.stop()) == ["close"])
        #expect(machine.state == .stopping)
        #expect(names(machine.transportClosed(nil, allowReconnect: false, now: .seconds(1))) == ["failPending cancelled", "stop driver", "closed nil"])
        #expect(machine.state == .disconnected)
    }

    @Test("A failed start ends the driver's run without a retry, even with a policy, and calls no onClosed")
    func failedStart() throws {
        var machine = Machine(reconnects: true)
        _ = try machine.start()
        #expect(names(machine.connectFailed(Self.lost, now: .zero)) == ["end failed connectionClosed"])
        #expect(machine.state == .disconnected)
        #expect(names(machine.reconnectEnded(Self.lost)) == [], "the driver's end of a failed start is not an onClosed")
    }

    @Test("A drop: pending calls fail, onReconnecting, then the driver is told; its attempts reconnect")
    func dropAndReconnect() throws {
        var machine = Machine(reconnects: true)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        #expect(names(machine.transportClosed(Self.lost, allowReconnect: true, now: .seconds(10)))
            == ["failPending connectionClosed", "reconnecting", "end dropped connectionClosed"])
        #expect(machine.state == .reconnecting(attempt: 0))
        #expect(names(machine.reconnectDue(attempt: 1)) == ["connect 1"])
        #expect(names(machine.connectFailed(Self.lost, now: .seconds(11))) == ["end dropped connectionClosed"])
        #expect(machine.state == .reconnecting(attempt: 1), "the driver decides what follows")
        #expect(names(machine.reconnectDue(attempt: 2)) == ["connect 2"])
        #expect(names(machine.connected(now: .seconds(12))) == ["opened", "reconnected"])
        #expect(machine.state == .connected)
        #expect(names(machine.reconnectDue(attempt: 3)) == [], "an attempt due while connected opens nothing")
    }

    @Test("The driver giving up closes the connection with its error")
    func driverGivesUp() throws {
        var machine = Machine(reconnects: true)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        _ = machine.transportClosed(Self.lost, allowReconnect: true, now: .zero)
        let gaveUp = RealtimeError(.reconnectGaveUp, "gave up")
        #expect(names(machine.reconnectEnded(gaveUp)) == ["closed reconnectGaveUp"])
        #expect(machine.state == .disconnected)
    }

    @Test("Close without allowReconnect, a clean end, or no retry policy closes: the driver is told the end for good")
    func closeWithoutReconnect() throws {
        var machine = Machine(reconnects: true)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        #expect(names(machine.transportClosed(Self.lost, allowReconnect: false, now: .zero))
            == ["failPending connectionClosed", "end failed connectionClosed", "closed connectionClosed"])
        var clean = Machine(reconnects: true)
        _ = try clean.start()
        _ = clean.connected(now: .zero)
        #expect(names(clean.transportClosed(nil, allowReconnect: false, now: .zero)) == ["failPending connectionClosed", "end closed", "closed nil"])
        var noPolicy = Machine(reconnects: false)
        _ = try noPolicy.start()
        _ = noPolicy.connected(now: .zero)
        #expect(names(noPolicy.transportClosed(Self.lost, allowReconnect: true, now: .zero))
            == ["failPending connectionClosed", "end failed connectionClosed", "closed connectionClosed"])
    }

    @Test("stop() during a reconnect wait ends at once and stops the driver; a connect that completes after stop() is closed")
    func stopWhileReconnecting() throws {
        var machine = Machine(reconnects: true)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        _ = machine.transportClosed(Self.lost, allowReconnect: true, now: .zero)
        #expect(names(machine.stop()) == ["failPending cancelled", "stop driver", "closed nil"])
        #expect(names(machine.connected(now: .seconds(1))) == ["close"])
        #expect(names(machine.reconnectEnded(nil)) == [], "the stopped driver's end is not a second onClosed")
    }

    @Test("stop() while the first connect runs: a connect that then fails stops the driver")
    func stopWhileConnecting() throws {
        var machine = Machine(reconnects: true)
        _ = try machine.start()
        #expect(names(machine.stop()) == ["close"])
        #expect(names(machine.connectFailed(Self.lost, now: .zero)) == ["stop driver"])
        #expect(machine.state == .disconnected)
    }

    @Test("Stateful reconnect: a lost socket resumes under the connection (calls accepted, no keep-alive), then carries on")
    func resumeAndCarryOn() throws {
        var machine = Machine(reconnects: true)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        let began1 = machine.resumeBegan()
        #expect(began1)
        #expect(machine.state == .resuming)
        #expect(machine.acceptsCalls, "calls wait in the outbox for the new socket")
        #expect(machine.nextDeadline == nil, "no keep-alive and no server timeout while no socket is open")
        #expect(names(machine.timerFired(now: .seconds(60))) == [])
        let began2 = machine.resumeBegan()
        #expect(!began2, "one resume at a time")
        #expect(names(machine.resumed(now: .seconds(61))) == [], "the app sees no reconnect")
        #expect(machine.state == .connected)
        #expect(machine.nextDeadline == .seconds(61 + 15), "the keep-alive counts from the new socket")
    }

    @Test("A resume that gives up is a drop from connected: pending calls fail, then the app's reconnect (or the close)")
    func resumeGivesUp() throws {
        var machine = Machine(reconnects: true)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        let began3 = machine.resumeBegan()
        #expect(began3)
        #expect(names(machine.transportClosed(Self.lost, allowReconnect: true, now: .seconds(5)))
            == ["failPending connectionClosed", "reconnecting", "end dropped connectionClosed"])
        #expect(machine.state == .reconnecting(attempt: 0))

        var closing = Machine(reconnects: false)
        _ = try closing.start()
        _ = closing.connected(now: .zero)
        let began4 = closing.resumeBegan()
        #expect(began4)
        #expect(names(closing.transportClosed(Self.lost, allowReconnect: true, now: .seconds(5)))
            == ["failPending connectionClosed", "end failed connectionClosed", "closed connectionClosed"])
        #expect(closing.state == .disconnected)
    }

    @Test("stop() while resuming ends the connection at once (no socket is open) and the resume with it; a socket resumed after that is closed")
    func stopWhileResuming() throws {
        var machine = Machine(reconnects: true)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        let began5 = machine.resumeBegan()
        #expect(began5)
        #expect(names(machine.stop()) == ["failPending cancelled", "stop resume", "stop driver", "closed nil"])
        #expect(machine.state == .disconnected)
        #expect(!machine.acceptsCalls)
        #expect(names(machine.resumed(now: .seconds(1))) == ["close"], "an attempt that opened a socket after stop() closes it")
        #expect(machine.state == .disconnected)
        #expect(names(machine.transportClosed(Self.lost, allowReconnect: true, now: .seconds(2))) == [], "the lost socket's late end changes nothing")

        var stopping = Machine(reconnects: true)
        _ = try stopping.start()
        _ = stopping.connected(now: .zero)
        _ = stopping.stop()
        let began6 = stopping.resumeBegan()
        #expect(!began6, "a socket lost after stop() is a transport's end, not a resume")
        #expect(stopping.state == .stopping)
    }

    @Test("Calls: ids in sequence, taken while connected or resuming and refused otherwise; a drop fails exactly the pending ones")
    func pendingCalls() throws {
        var machine = Machine(reconnects: true)
        #expect(throws: RealtimeError.self) { try machine.reserveInvocation() }
        _ = try machine.start()
        #expect(throws: RealtimeError.self, "not while connecting") { try machine.reserveInvocation() }
        _ = machine.connected(now: .zero)
        let first = try machine.reserveInvocation()
        let second = try machine.reserveInvocation()
        #expect((first, second) == ("1", "2"))
        #expect(machine.nextId() == "3", "upload streams take ids from the same sequence")
        machine.callStarted(first, "call 1")
        machine.callStarted(second, "call 2")
        #expect(machine.pendingCall(second) == "call 2")
        #expect(machine.callEnded(first) == "call 1", "its completion arrived")
        #expect(machine.callEnded(first) == nil, "completed once")
        let began = machine.resumeBegan()
        #expect(began)
        let resumingId = try machine.reserveInvocation()
        machine.callStarted(resumingId, "call 4")
        #expect(machine.pendingCount == 2, "a resume fails nothing: the calls wait for the new socket")
        #expect(names(machine.transportClosed(Self.lost, allowReconnect: true, now: .seconds(1)))
            == ["failPending connectionClosed [\"call 2\", \"call 4\"]", "reconnecting", "end dropped connectionClosed"])
        #expect(machine.pendingCount == 0)
        #expect(throws: RealtimeError.self, "not while reconnecting") { try machine.reserveInvocation() }
        #expect(machine.callEnded(second) == nil, "a completion after the drop finds nothing to complete")
    }

    @Test("stop() may return once the machine left stopping and every end being handled was performed")
    func stopWaiters() throws {
        var machine = Machine(reconnects: true)
        #expect(machine.stopMayReturn && machine.isClosed, "not running")
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        #expect(!machine.isClosed)
        _ = machine.stop()
        #expect(!machine.stopMayReturn, "the transport is still closing")
        _ = machine.transportClosed(nil, allowReconnect: false, now: .seconds(1))
        #expect(machine.state == .disconnected)
        #expect(!machine.stopMayReturn, "its actions (onClosed among them) are being performed")
        #expect(!machine.isClosed)
        let released = machine.endHandled()
        #expect(released && machine.isClosed)

        // Two ends at once (a failed connect while a transport's end is performed): the waiters go
        // when both are done.
        var twice = Machine(reconnects: true)
        _ = try twice.start()
        _ = twice.connected(now: .zero)
        _ = twice.transportClosed(Self.lost, allowReconnect: true, now: .seconds(1))
        _ = twice.reconnectDue(attempt: 1)
        _ = twice.stop()
        _ = twice.connectFailed(Self.lost, now: .seconds(2))
        let first = twice.endHandled()
        #expect(!first, "one end still being handled")
        let second = twice.endHandled()
        #expect(second)
    }

    @Test("Keep-alive pings after 15 s of silence from the client; 30 s of silence from the server is a timeout")
    func timers() throws {
        var machine = Machine(reconnects: false)
        _ = try machine.start()
        #expect(machine.nextDeadline == nil)
        _ = machine.connected(now: .zero)
        #expect(machine.nextDeadline == .seconds(15))
        #expect(names(machine.timerFired(now: .seconds(14))) == [])
        #expect(names(machine.timerFired(now: .seconds(15))) == ["ping"])
        machine.didReceive(now: .seconds(20))
        machine.didSend(now: .seconds(28))
        #expect(machine.nextDeadline == .seconds(43))
        #expect(names(machine.timerFired(now: .seconds(43))) == ["ping"])
        #expect(names(machine.timerFired(now: .seconds(50))) == ["abort timeout"])
    }

    @Test("While reading waits for a slow consumer, the server's silence does not count")
    func pausedReading() throws {
        var machine = Machine(reconnects: false)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        machine.readingPaused(true, now: .seconds(1))
        machine.didSend(now: .seconds(100))
        #expect(names(machine.timerFired(now: .seconds(100))) == [])
        machine.readingPaused(false, now: .seconds(100))
        #expect(names(machine.timerFired(now: .seconds(129))) == ["ping"], "pings go on; no timeout yet")
        #expect(names(machine.timerFired(now: .seconds(130))) == ["abort timeout"])
    }
}

/// A hub connection's reconnect rules, as its `ReconnectDriver` follows them: the retry policy is
/// asked with the attempts so far, the time since the connection was lost and the last failure.
@Suite("Hub connection reconnect rules")
struct HubReconnectRulesTests {
    static let lost = RealtimeError(.connectionClosed, "lost")
    static let again = RealtimeError(.connectionClosed, "again")

    static func steps(_ actions: [ReconnectMachine.Action]) -> [String] {
        actions.compactMap { action in
            switch action {
            case .connect(let attempt): "connect \(attempt)"
            case .scheduleRetry(let delay, let attempt): "retry \(attempt) after \(delay)"
            case .finished(let error): "finished \(error.map { "\($0.code)" } ?? "nil")"
            case .waitForNetwork, .publish, .report: nil
            }
        }
    }

    /// A machine with a hub connection's policy, its first connection open at `t = 0`.
    static func connected(_ policy: any RetryPolicy) -> ReconnectMachine {
        var machine = ReconnectMachine(policy: HubConnection.reconnectPolicy(policy))
        _ = machine.start()
        _ = machine.opened(now: .zero)
        return machine
    }

    /// A drop (or failed attempt) at `now`: the delay the policy gave, or the end.
    static func fail(_ machine: inout ReconnectMachine, _ error: RealtimeError, at now: Duration) -> [String] {
        var actions = machine.ended(.dropped(error), now: now)
        actions += machine.networkReachable()
        return steps(actions)
    }

    @Test("No retry policy: the driver never reconnects")
    func noPolicy() {
        #expect(HubConnection.reconnectPolicy(nil).backoff.delay(forAttempt: 1, random: 0) == nil)
    }

    @Test("The default policy waits 0, 2, 10 and 30 s, then gives up with the last failure underneath")
    func defaultDelays() throws {
        var machine = Self.connected(DefaultRetryPolicy())
        #expect(Self.fail(&machine, Self.lost, at: .seconds(100)) == ["retry 1 after 0.0 seconds"])
        #expect(Self.steps(machine.retryDue()) == ["connect 1"])
        #expect(Self.fail(&machine, Self.lost, at: .seconds(100)) == ["retry 2 after 2.0 seconds"])
        _ = machine.retryDue()
        #expect(Self.fail(&machine, Self.lost, at: .seconds(102)) == ["retry 3 after 10.0 seconds"])
        _ = machine.retryDue()
        #expect(Self.fail(&machine, Self.lost, at: .seconds(112)) == ["retry 4 after 30.0 seconds"])
        _ = machine.retryDue()
        let end = machine.ended(.dropped(Self.again), now: .seconds(142))
        #expect(Self.steps(end) == ["finished reconnectGaveUp"])
        guard case .finished(let gaveUp?)? = end.last else { Issue.record("no end: \(end)"); return }
        #expect(gaveUp.detail.contains("4 reconnect attempts") && gaveUp.detail.contains("again"), "\(gaveUp.detail)")
        #expect(machine.phase == .stopped)
    }

    @Test("The policy sees the attempts so far, the time since the drop and the last failure")
    func policyQuestions() throws {
        let questions = Recorder<String>()
        var machine = Self.connected(Recording(questions) { _ in 1 })
        _ = Self.fail(&machine, Self.lost, at: .seconds(10))
        _ = machine.retryDue()
        _ = Self.fail(&machine, Self.again, at: .seconds(11))
        _ = machine.retryDue()
        _ = machine.opened(now: .seconds(12))
        #expect(machine.phase == .connected)
        #expect(questions.all == ["0 0.0 lost", "1 1.0 again"])
    }

    @Test("A reconnected connection that drops before it proved stable continues the reconnect, until the policy gives up")
    func unstableReconnectsContinue() throws {
        let questions = Recorder<String>()
        var machine = Self.connected(Recording(questions) { $0.retryCount < 3 ? 1 : nil })
        _ = Self.fail(&machine, Self.lost, at: .seconds(100))
        // Each reconnect gets through the handshake and is lost within a second, with no message.
        for (opened, dropped, next) in [(101, 102, "retry 2 after 1.0 seconds"), (103, 104, "retry 3 after 1.0 seconds")] {
            _ = machine.retryDue()
            _ = machine.opened(now: .seconds(opened))
            #expect(Self.fail(&machine, Self.again, at: .seconds(dropped)) == [next])
        }
        _ = machine.retryDue()
        _ = machine.opened(now: .seconds(105))
        #expect(Self.fail(&machine, Self.again, at: .seconds(106)) == ["finished reconnectGaveUp"])
        // The policy saw one reconnect: its attempts and the time since it began.
        #expect(questions.all == ["0 0.0 lost", "1 2.0 again", "2 4.0 again", "3 6.0 again"])
    }

    @Test("A reconnected connection that stays open 5 s, or carries a message, ends the reconnect: the next drop starts a new one")
    func stableReconnectsResetTheCount() throws {
        var machine = Self.connected(DefaultRetryPolicy())
        _ = Self.fail(&machine, Self.lost, at: .seconds(100))
        _ = machine.retryDue()
        _ = machine.opened(now: .seconds(100))
        // Open for 5 s.
        #expect(Self.fail(&machine, Self.lost, at: .seconds(105)) == ["retry 1 after 0.0 seconds"])
        _ = machine.retryDue()
        _ = machine.opened(now: .seconds(105))
        // A message after 0.5 s.
        machine.progressed()
        #expect(Self.fail(&machine, Self.lost, at: .seconds(105.5)) == ["retry 1 after 0.0 seconds"])
        // Neither: the reconnect goes on.
        _ = machine.retryDue()
        _ = machine.opened(now: .seconds(106))
        #expect(Self.fail(&machine, Self.lost, at: .seconds(107)) == ["retry 2 after 2.0 seconds"])
    }

    @Test("The first connection dropping at once starts the reconnect at its first attempt")
    func unstableFirstConnection() throws {
        var machine = Self.connected(DefaultRetryPolicy())
        #expect(Self.fail(&machine, Self.lost, at: .milliseconds(10)) == ["retry 1 after 0.0 seconds"])
    }

    /// A retry policy that records what it is asked: "retryCount elapsed reason".
    struct Recording: RetryPolicy {
        let questions: Recorder<String>
        let answer: @Sendable (RetryContext) -> Double?
        init(_ questions: Recorder<String>, _ answer: @escaping @Sendable (RetryContext) -> Double?) {
            self.questions = questions
            self.answer = answer
        }

        func nextRetryInterval(retryContext: RetryContext) -> TimeInterval? {
            let reason = (retryContext.retryReason as? RealtimeError)?.detail ?? "?"
            questions.append("\(retryContext.retryCount) \(retryContext.elapsed) \(reason)")
            return answer(retryContext)
        }
    }
}
