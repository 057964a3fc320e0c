import Foundation
import RealtimeCore
@testable import SocketIOEngine
import Testing

/// A namespace's lifecycle rules, without sockets: the waiters are strings (the client uses
/// continuations).
@Suite("SocketIONamespaceMachine")
struct SocketIONamespaceMachineTests {
    typealias Machine = SocketIONamespaceMachine<String>

    static func event(_ name: String, _ arguments: JSONValue...) -> SocketIOPacket {
        SocketIOPacket(type: .event, namespace: "/", data: .array([.string(name)] + arguments))
    }

    /// Whether the machine holds an event named `name` (a mutating call cannot sit inside `#expect`).
    func hold(_ machine: inout Machine, _ name: String) -> Bool {
        machine.holdsEvent(Self.event(name))
    }

    func resumed(_ action: Machine.WaitAction) -> String? {
        guard case .resume(let waiter) = action else { return nil }
        return waiter
    }

    @Test("connect, the CONNECT answer, a drop while wanted, the answer again")
    func connectAndReconnect() {
        var machine = Machine()
        #expect(machine.status == .notConnected)
        #expect(resumed(machine.waitForConnection(UUID(), "first")) == nil, "waits for the answer")
        #expect(machine.requestConnection() == .connecting)
        #expect(machine.wantsConnection)
        #expect(machine.sendingConnect() == nil, "connecting already: nothing to publish")

        let connected = machine.connected(sid: "s1", pid: nil)
        #expect(connected.published == .connected)
        #expect(connected.waiters == ["first"])
        #expect(machine.sid == "s1")
        #expect(!machine.recovered)
        #expect(resumed(machine.waitForConnection(UUID(), "late")) == "late", "connected: resumed at once")
        #expect(machine.requestConnection() == nil, "connecting a connected namespace changes nothing")

        let closed = machine.sessionClosed()
        #expect(closed.wasConnected)
        #expect(closed.status == .connecting, "still wanted: the manager reconnects")
        #expect(closed.published == .connecting)
        #expect(machine.connected(sid: "s2", pid: nil).published == .connected)
    }

    @Test("events that arrive before the CONNECT answer are delivered right after it, in order; a drop forgets them")
    func heldEvents() {
        var machine = Machine()
        _ = machine.requestConnection()
        #expect(hold(&machine, "a"))
        #expect(hold(&machine, "b"))
        let connected = machine.connected(sid: "s", pid: nil)
        #expect(connected.buffered.map { $0.data?.arrayValue?.first?.stringValue } == ["a", "b"])
        #expect(!hold(&machine, "c"), "connected: delivered at once")

        _ = machine.sessionClosed()
        #expect(hold(&machine, "lost"))
        _ = machine.sessionClosed()
        #expect(machine.connected(sid: "s", pid: nil).buffered.isEmpty, "held events do not outlive their session")
    }

    @Test("the app's disconnect: waiting connects fail, no reconnect; only an active namespace has anything to end")
    func disconnect() {
        var idle = Machine()
        let nothing = idle.disconnect()
        #expect(!nothing.wasActive)
        #expect(nothing.published == .disconnected)

        var machine = Machine()
        _ = machine.waitForConnection(UUID(), "waiting")
        _ = machine.requestConnection()
        #expect(hold(&machine, "x"))
        let ending = machine.disconnect()
        #expect(ending.wasActive)
        #expect(ending.waiters == ["waiting"])
        #expect(ending.published == .disconnected)
        #expect(!machine.wantsConnection)
        let closed = machine.sessionClosed()
        #expect(closed.status == .disconnected, "not wanted: no reconnect")
        #expect(!closed.wasConnected)
        #expect(machine.connected(sid: "s", pid: nil).buffered.isEmpty, "the app's disconnect drops held events")
    }

    @Test("a refusal ends the waits and the wish to connect; a timed-out wait is handed back once")
    func refusalAndGivingUp() {
        var machine = Machine()
        let id = UUID()
        _ = machine.waitForConnection(id, "timed out")
        _ = machine.waitForConnection(UUID(), "still waiting")
        _ = machine.requestConnection()
        #expect(machine.stopWaiting(id) == "timed out")
        #expect(machine.stopWaiting(id) == nil)
        let refused = machine.refused()
        #expect(refused.wasActive)
        #expect(refused.waiters == ["still waiting"])
        #expect(refused.published == .disconnected)
        #expect(!machine.wantsConnection)
    }

    @Test("connection state recovery: pid and offset kept across drops, recovered on the same pid, forgotten on a server DISCONNECT")
    func recovery() {
        var machine = Machine()
        _ = machine.requestConnection()
        _ = machine.connected(sid: "s1", pid: "p1")
        #expect(!machine.recovered, "the first connection recovers nothing")
        #expect(machine.recordOffset([.string("a"), .string("off-1")]) == "off-1")
        #expect(machine.recordOffset([.string("only the name")]) == nil, "an event with no offset")
        #expect(machine.lastOffset == "off-1")

        _ = machine.sessionClosed()
        _ = machine.connected(sid: "s2", pid: "p1")
        #expect(machine.recovered)
        #expect(machine.lastOffset == "off-1", "kept: the next CONNECT sends it")

        _ = machine.sessionClosed()
        _ = machine.connected(sid: "s3", pid: "p2")
        #expect(!machine.recovered, "another pid: a new session")
        #expect(machine.lastOffset == nil)

        #expect(machine.recordOffset([.string("b"), .string("off-2")]) == "off-2")
        #expect(machine.serverDisconnected() == .disconnected)
        #expect(machine.pid == nil)
        #expect(machine.lastOffset == nil)
        #expect(!machine.wantsConnection, "the server ended it on purpose: no reconnect")
    }

    @Test("without a pid, offsets are not taken off the arguments")
    func noRecoveryNoOffset() {
        var machine = Machine()
        _ = machine.requestConnection()
        _ = machine.connected(sid: "s", pid: nil)
        #expect(machine.recordOffset([.string("a"), .string("looks like an offset")]) == nil)
    }

    @Test("the manager's end fails every waiting connect and says whether the namespace was wanted")
    func managerStopped() {
        var machine = Machine()
        _ = machine.waitForConnection(UUID(), "w")
        _ = machine.requestConnection()
        let ending = machine.managerStopped()
        #expect(ending.wasActive)
        #expect(ending.waiters == ["w"])
        #expect(ending.published == .disconnected)
        #expect(machine.managerStopped().published == nil, "told once")
        #expect(!machine.managerStopped().wasActive)
    }
}
