import RealtimeCore
@testable import SocketIOEngine
import Testing

/// The Engine.IO session's rules, without sockets or clocks: the waiters are numbers (the session
/// uses continuations) and times are offsets given to each input.
@Suite("EngineIOSessionMachine")
struct EngineIOSessionMachineTests {
    typealias Machine = EngineIOSessionMachine<Int, String>

    /// pingInterval 25 s, pingTimeout 20 s: the limit is 45 s after the last ping.
    static let handshake = try! EngineIOSession.parseHandshake(
        #"{"sid":"s1","upgrades":["websocket"],"pingInterval":25000,"pingTimeout":20000,"maxPayload":1000000}"#)

    func parked(_ action: Machine.ParkAction) -> String? {
        guard case .parked(let wake) = action else { return nil }
        return wake ?? "nobody"
    }

    func resumed(_ action: Machine.ParkAction) -> (Int, stop: Bool)? {
        guard case .resume(let reader, let stop) = action else { return nil }
        return (reader, stop)
    }

    func proceeds(_ action: Machine.PauseAction) -> String? {
        guard case .proceed(let upgrade) = action else { return nil }
        return upgrade
    }

    @Test("opening on polling, then the upgrade: probe, reader parks, pause, upgrade packet, reader stops")
    func upgradeWithTheReaderParkedFirst() {
        var machine = Machine()
        #expect(machine.phase == .opening)
        #expect(machine.readerStep() == .poll)
        #expect(machine.opened(Self.handshake, on: .polling, now: .seconds(1)) == .seconds(46))
        #expect(machine.phase == .polling)
        #expect(machine.transport == .polling)
        #expect(machine.handshake == Self.handshake)
        #expect(machine.readerStep() == .poll)

        machine.probing()
        #expect(machine.phase == .probing)
        #expect(machine.readerStep() == .park, "no new GET while the probe is out")
        #expect(parked(machine.readerParks(7)) == "nobody", "nobody waited for the reader yet")

        #expect(proceeds(machine.pausePolling("upgrade")) == "upgrade", "the reader is parked already")
        #expect(machine.phase == .upgrading)
        #expect(machine.transport == .polling, "polling carries the session until the upgrade packet is out")

        #expect(machine.upgraded() == 7, "the parked reader is handed back, to stop")
        #expect(machine.phase == .websocket)
        #expect(machine.transport == .websocket)
        #expect(machine.readerStep() == .stop)
        #expect(machine.upgraded() == nil, "a waiter is handed back once")
    }

    @Test("the probe is answered before the reader parks: the upgrade waits for it and is woken by it")
    func upgradeWaitsForTheReader() {
        var machine = Machine()
        _ = machine.opened(Self.handshake, on: .polling, now: .zero)
        machine.probing()
        #expect(proceeds(machine.pausePolling("upgrade")) == nil, "the reader has not parked: the upgrade waits")
        #expect(machine.phase == .upgrading)
        #expect(machine.readerStep() == .park)
        #expect(parked(machine.readerParks(3)) == "upgrade", "the reader wakes the waiting upgrade")
        #expect(machine.pauseCancelled() == nil, "the upgrade was handed out already")
        #expect(machine.upgraded() == 3)
    }

    @Test("a failed probe or upgrade lets polling go on, with the parked reader polling again")
    func failedUpgrade() {
        var machine = Machine()
        _ = machine.opened(Self.handshake, on: .polling, now: .zero)
        machine.probing()
        #expect(parked(machine.readerParks(1)) == "nobody")
        #expect(machine.upgradeFailed() == 1, "handed back, to poll again")
        #expect(machine.phase == .polling)
        #expect(machine.readerStep() == .poll)

        // A second upgrade that fails while waiting for the reader leaves no waiter behind.
        machine.probing()
        #expect(proceeds(machine.pausePolling("second")) == nil)
        #expect(machine.upgradeFailed() == nil, "the reader had not parked")
        #expect(machine.phase == .polling)
        #expect(resumed(machine.readerParks(2)).map { $0.stop } == false, "a reader that comes late polls at once")
    }

    @Test("a probe still out when its hold ends: polling goes on, and a late answer pauses it again")
    func probeHoldEnds() {
        var machine = Machine()
        _ = machine.opened(Self.handshake, on: .polling, now: .zero)
        machine.probing()
        #expect(parked(machine.readerParks(1)) == "nobody")
        #expect(machine.probeHoldEnded() == 1, "the parked reader is handed back, to poll again")
        #expect(machine.phase == .polling)
        #expect(machine.readerStep() == .poll, "GETs go on while the probe is out")
        #expect(machine.probeHoldEnded() == nil, "a hold ends once")

        // The answer comes while a GET is in flight: the upgrade waits for the reader to park.
        #expect(proceeds(machine.pausePolling("upgrade")) == nil)
        #expect(machine.phase == .upgrading)
        #expect(machine.probeHoldEnded() == nil, "a hold timer that fires after the answer changes nothing")
        #expect(machine.phase == .upgrading)
        #expect(machine.readerStep() == .park)
        #expect(parked(machine.readerParks(2)) == "upgrade")
        #expect(machine.upgraded() == 2)
        #expect(machine.phase == .websocket)
    }

    @Test("a reader that offers to park after the outcome is answered at once")
    func lateReader() {
        var machine = Machine()
        _ = machine.opened(Self.handshake, on: .polling, now: .zero)
        machine.probing()
        #expect(machine.readerStep() == .park)
        // The upgrade completes between the reader's check and its parking (the reader had not
        // parked, e.g. its GET was still in flight; the session does not let this happen, but the
        // machine must not hold the reader forever if it did).
        #expect(machine.upgraded() == nil)
        let answer = resumed(machine.readerParks(5))
        #expect(answer?.0 == 5)
        #expect(answer?.stop == true)
    }

    @Test("cancellation and the session's end hand back every parked waiter once")
    func cancellationAndEnd() {
        var machine = Machine()
        _ = machine.opened(Self.handshake, on: .polling, now: .zero)
        machine.probing()
        _ = machine.readerParks(9)
        #expect(machine.readerCancelled() == 9)
        #expect(machine.readerCancelled() == nil)

        var other = Machine()
        _ = other.opened(Self.handshake, on: .polling, now: .zero)
        other.probing()
        #expect(proceeds(other.pausePolling("upgrade")) == nil)
        #expect(other.pauseCancelled() == "upgrade")
        #expect(other.pauseCancelled() == nil)

        var ending = Machine()
        _ = ending.opened(Self.handshake, on: .polling, now: .zero)
        ending.probing()
        _ = ending.pausePolling("upgrade")
        let left = ending.ended()
        #expect(left.reader == nil)
        #expect(left.upgrade == "upgrade")
        #expect(ending.phase == .closed)
        #expect(ending.readerStep() == .stop)
        #expect(proceeds(ending.pausePolling("late")) == "late", "nothing waits on a closed session")
        #expect(resumed(ending.readerParks(4))?.stop == true)
    }

    @Test("a session opened on the WebSocket has no polling reader and no upgrade")
    func webSocketOnly() {
        var machine = Machine()
        #expect(machine.opened(Self.handshake, on: .websocket, now: .seconds(2)) == .seconds(47))
        #expect(machine.phase == .websocket)
        #expect(machine.transport == .websocket)
        #expect(machine.readerStep() == .stop)
        machine.probing()
        #expect(machine.phase == .websocket, "no probe once on the WebSocket")
    }

    @Test("the heartbeat: a ping moves the deadline on; none within pingInterval + pingTimeout ends the session")
    func heartbeat() {
        var machine = Machine()
        guard case .idle = machine.heartbeatDue(now: .seconds(100)) else {
            Issue.record("nothing is watched before the open packet")
            return
        }
        #expect(machine.opened(Self.handshake, on: .polling, now: .zero) == .seconds(45))
        machine.pinged(now: .seconds(25))
        machine.pinged(now: .seconds(30))
        guard case .rearm(let next) = machine.heartbeatDue(now: .seconds(45)) else {
            Issue.record("a ping came since: the deadline moves on")
            return
        }
        #expect(next == .seconds(75), "45 s after the last ping")
        // A deadline that fires early (the timer queue wakes on a grid) only moves on.
        guard case .rearm(let same) = machine.heartbeatDue(now: .seconds(74)) else {
            Issue.record("not due yet")
            return
        }
        #expect(same == .seconds(75))
        #expect(machine.heartbeatFailure == nil)
        guard case .expired(let error) = machine.heartbeatDue(now: .seconds(75)) else {
            Issue.record("no ping for 45 s: expired")
            return
        }
        #expect(error.code == .timeout)
        #expect(machine.heartbeatFailure?.code == .timeout, "kept for the readers that end with it")
        guard case .idle = machine.heartbeatDue(now: .seconds(200)) else {
            Issue.record("it expires once")
            return
        }
    }

    /// Engine.IO 3: the client pings and the server's pongs are recorded the same way; a server
    /// that stops answering ends the session with a timeout that names the pong.
    @Test("Engine.IO 3: no pong within pingInterval + pingTimeout ends the session")
    func clientPingHeartbeat() {
        var machine = Machine()
        #expect(machine.opened(Self.handshake, on: .websocket, now: .zero, clientPings: true) == .seconds(45))
        machine.pinged(now: .seconds(25))
        guard case .rearm(let next) = machine.heartbeatDue(now: .seconds(45)) else {
            Issue.record("a pong came since: the deadline moves on")
            return
        }
        #expect(next == .seconds(70))
        guard case .expired(let error) = machine.heartbeatDue(now: .seconds(70)) else {
            Issue.record("no pong for 45 s: expired")
            return
        }
        #expect(error.code == .timeout)
        #expect(error.description.contains("no pong from the server"), "\(error)")
    }

    @Test("the heartbeat stops with the session")
    func heartbeatStopsAtTheEnd() {
        var machine = Machine()
        _ = machine.opened(Self.handshake, on: .websocket, now: .zero)
        _ = machine.ended()
        guard case .idle = machine.heartbeatDue(now: .seconds(100)) else {
            Issue.record("a session that is over does not expire")
            return
        }
        #expect(machine.heartbeatFailure == nil)
    }

    @Test("closing is recorded for the reader, which then reports the end as the client's; only the first queues the packet")
    func closing() {
        var machine = Machine()
        _ = machine.opened(Self.handshake, on: .websocket, now: .zero)
        #expect(!machine.closeRequested)
        let first = machine.closing()
        #expect(first)
        #expect(machine.closeRequested)
        let second = machine.closing()
        #expect(!second)
        #expect(machine.closeRequested)
    }
}
