import RealtimeCore
@testable import SignalRHub
import RealtimeTesting
import Testing

/// The lifecycle rules, without sockets or clocks: times are offsets given to each input.
@Suite("HubConnectionStateMachine")
struct HubConnectionStateMachineTests {
    static let lost = RealtimeError(.connectionClosed, "lost")

    func names(_ actions: [HubConnectionStateMachine.Action]) -> [String] {
        actions.map { action in
            switch action {
            case .connect(let attempt): "connect \(attempt)"
            case .reconnect(let delay, let attempt): "reconnect \(attempt) after \(delay)"
            case .failPending(let error): "failPending \(error.code)"
            case .notifyReconnecting: "reconnecting"
            case .notifyReconnected: "reconnected"
            case .notifyClosed(let error): "closed \(error.map { "\($0.code)" } ?? "nil")"
            case .sendPing: "ping"
            case .abortTransport(let error): "abort \(error.code)"
            case .closeTransport: "close"
            }
        }
    }

    static let defaultDelays: @Sendable (HubConnectionStateMachine.RetryQuestion) -> Duration? = HubConnection.retryDelay(DefaultRetryPolicy())

    @Test("Start, connect, stop")
    func startAndStop() throws {
        var machine = HubConnectionStateMachine(retryDelay: nil)
        #expect(names(try machine.start()) == ["connect 0"])
        #expect(throws: RealtimeError.self) { try machine.start() }
        #expect(names(machine.connected(now: .zero)) == [])
        #expect(machine.state == .connected)
        #expect(names(machine.stop()) == ["close"])
        #expect(machine.state == .stopping)
        #expect(names(machine.transportClosed(nil, allowReconnect: false, now: .seconds(1))) == ["failPending cancelled", "closed nil"])
        #expect(machine.state == .disconnected)
    }

    @Test("A failed start does not reconnect, even with a policy")
    func failedStart() throws {
        var machine = HubConnectionStateMachine(retryDelay: Self.defaultDelays)
        _ = try machine.start()
        #expect(names(machine.connectFailed(Self.lost, now: .zero)) == [])
        #expect(machine.state == .disconnected)
    }

    @Test("The default policy waits 0, 2, 10 and 30 s, then gives up")
    func defaultDelays() throws {
        var machine = HubConnectionStateMachine(retryDelay: Self.defaultDelays)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        #expect(names(machine.transportClosed(Self.lost, allowReconnect: true, now: .seconds(100)))
            == ["failPending connectionClosed", "reconnecting", "reconnect 1 after 0.0 seconds"])
        #expect(names(machine.connectFailed(Self.lost, now: .seconds(100))) == ["reconnect 2 after 2.0 seconds"])
        #expect(names(machine.connectFailed(Self.lost, now: .seconds(102))) == ["reconnect 3 after 10.0 seconds"])
        #expect(names(machine.connectFailed(Self.lost, now: .seconds(112))) == ["reconnect 4 after 30.0 seconds"])
        #expect(names(machine.connectFailed(Self.lost, now: .seconds(142))) == ["closed reconnectGaveUp"])
        #expect(machine.state == .disconnected)
    }

    @Test("A reconnect that succeeds reports reconnected; the policy sees the count and the elapsed time")
    func reconnectSucceeds() throws {
        let questions = Recorder<String>()
        var machine = HubConnectionStateMachine(retryDelay: { question in
            questions.append("\(question.previousRetryCount) \(question.elapsed)")
            return .seconds(1)
        })
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        _ = machine.transportClosed(Self.lost, allowReconnect: true, now: .seconds(10))
        _ = machine.connectFailed(Self.lost, now: .seconds(11))
        #expect(names(machine.connected(now: .seconds(12))) == ["reconnected"])
        #expect(machine.state == .connected)
        #expect(questions.all == ["0 0.0 seconds", "1 1.0 seconds"])
    }

    @Test("A reconnected connection that drops before it proved stable continues the reconnect, until the policy gives up")
    func unstableReconnectsContinue() throws {
        let questions = Recorder<String>()
        var machine = HubConnectionStateMachine(retryDelay: { question in
            questions.append("\(question.previousRetryCount) \(question.elapsed) \(question.reason.detail)")
            return question.previousRetryCount < 3 ? .seconds(1) : nil
        })
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        _ = machine.transportClosed(Self.lost, allowReconnect: true, now: .seconds(100))
        // Each reconnect gets through the handshake and is lost within a second, with no message.
        #expect(names(machine.connected(now: .seconds(101))) == ["reconnected"])
        let again = RealtimeError(.connectionClosed, "again")
        #expect(names(machine.transportClosed(again, allowReconnect: true, now: .seconds(102)))
            == ["failPending connectionClosed", "reconnecting", "reconnect 2 after 1.0 seconds"])
        _ = machine.connected(now: .seconds(103))
        #expect(names(machine.transportClosed(again, allowReconnect: true, now: .seconds(104)))
            == ["failPending connectionClosed", "reconnecting", "reconnect 3 after 1.0 seconds"])
        _ = machine.connected(now: .seconds(105))
        #expect(names(machine.transportClosed(again, allowReconnect: true, now: .seconds(106)))
            == ["failPending connectionClosed", "reconnecting", "closed reconnectGaveUp"])
        #expect(machine.state == .disconnected)
        // The policy saw one reconnect: its attempts and the time since it began.
        #expect(questions.all == ["0 0.0 seconds lost", "1 2.0 seconds again", "2 4.0 seconds again", "3 6.0 seconds again"])
    }

    @Test("A reconnected connection that stays open 5 s, or carries a message, ends the reconnect: the next drop starts a new one")
    func stableReconnectsResetTheCount() throws {
        var machine = HubConnectionStateMachine(retryDelay: Self.defaultDelays)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        _ = machine.transportClosed(Self.lost, allowReconnect: true, now: .seconds(100))
        _ = machine.connected(now: .seconds(100))
        // Open for 5 s.
        #expect(names(machine.transportClosed(Self.lost, allowReconnect: true, now: .seconds(105)))
            == ["failPending connectionClosed", "reconnecting", "reconnect 1 after 0.0 seconds"])
        _ = machine.connected(now: .seconds(105))
        // A message after 0.5 s.
        machine.progressed()
        #expect(names(machine.transportClosed(Self.lost, allowReconnect: true, now: .seconds(105.5)))
            == ["failPending connectionClosed", "reconnecting", "reconnect 1 after 0.0 seconds"])
        // Neither: the reconnect goes on.
        _ = machine.connected(now: .seconds(106))
        #expect(names(machine.transportClosed(Self.lost, allowReconnect: true, now: .seconds(107)))
            == ["failPending connectionClosed", "reconnecting", "reconnect 2 after 2.0 seconds"])
    }

    @Test("The first connection dropping at once starts the reconnect at its first attempt")
    func unstableFirstConnection() throws {
        var machine = HubConnectionStateMachine(retryDelay: Self.defaultDelays)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        #expect(names(machine.transportClosed(Self.lost, allowReconnect: true, now: .milliseconds(10)))
            == ["failPending connectionClosed", "reconnecting", "reconnect 1 after 0.0 seconds"])
    }

    @Test("Close without allowReconnect, or a clean end, closes even with a policy")
    func closeWithoutReconnect() throws {
        var machine = HubConnectionStateMachine(retryDelay: Self.defaultDelays)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        #expect(names(machine.transportClosed(Self.lost, allowReconnect: false, now: .zero)) == ["failPending connectionClosed", "closed connectionClosed"])
        var clean = HubConnectionStateMachine(retryDelay: Self.defaultDelays)
        _ = try clean.start()
        _ = clean.connected(now: .zero)
        #expect(names(clean.transportClosed(nil, allowReconnect: false, now: .zero)) == ["failPending connectionClosed", "closed nil"])
    }

    @Test("stop() during a reconnect wait ends at once; a connect that completes after stop() is closed")
    func stopWhileReconnecting() throws {
        var machine = HubConnectionStateMachine(retryDelay: Self.defaultDelays)
        _ = try machine.start()
        _ = machine.connected(now: .zero)
        _ = machine.transportClosed(Self.lost, allowReconnect: true, now: .zero)
        #expect(names(machine.stop()) == ["failPending cancelled", "closed nil"])
        #expect(names(machine.connected(now: .seconds(1))) == ["close"])
    }

    @Test("Keep-alive pings after 15 s of silence from the client; 30 s of silence from the server is a timeout")
    func timers() throws {
        var machine = HubConnectionStateMachine(retryDelay: nil)
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
        var machine = HubConnectionStateMachine(retryDelay: nil)
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
