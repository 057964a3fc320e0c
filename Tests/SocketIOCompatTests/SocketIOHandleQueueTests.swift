import Foundation
import RealtimeTesting
import SocketIO
import Testing

// socket.io-client-swift's semantics (issue: handlers on handleQueue, its client events and their
// data, once/off/removeAllHandlers, ack timeouts across a drop), against python-socketio
// (Tests/SocketIOEngineTests/Peers/sio_server.py; REALTIME_PYTHON names the venv's python).

private let peerScript = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("SocketIOEngineTests/Peers/sio_server.py").path

/// A serial queue that knows when code runs on it.
private final class MarkedQueue: Sendable {
    let queue = DispatchQueue(label: "socketio-compat-handle-queue")
    private let key = DispatchSpecificKey<Int>()

    init() { queue.setSpecific(key: key, value: 7) }

    var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == 7 }
}

/// Marks the main queue (Linux's `DispatchQueue.main` hands out a new wrapper per call, so queues
/// are told apart by a specific set on the queue itself).
private let mainQueueKey: DispatchSpecificKey<Int> = {
    let key = DispatchSpecificKey<Int>()
    DispatchQueue.main.setSpecific(key: key, value: 1)
    return key
}()

/// A view model as apps write it: main-actor isolated, handlers capturing `[weak self]`.
@MainActor
private final class WelcomeModel {
    var welcomed: [String] = []
    let seen = Recorder<Bool>()

    func attach(to socket: SocketIOClient) {
        socket.on("welcome") { [weak self] data, ack in
            self?.update(data)
        }
    }

    func update(_ data: [Any]) {
        welcomed.append((data.first as? [String: Any])?["sid"] as? String ?? "")
        // On Linux the main queue may be drained by a thread other than the process's first one
        // (dispatchMain), so "on main" is the main queue, not Thread.isMainThread.
        seen.append(DispatchQueue.getSpecific(key: mainQueueKey) == 1)
    }
}

@Suite("SocketIO: socket.io-client-swift's queue, events and timers", .serialized, .timeLimit(.minutes(2)))
struct SocketIOHandleQueueTests {
    @Test("every handler, ack callback and completion runs on handleQueue; connect() returns before statusChange runs")
    func handlersRunOnTheHandleQueue() async throws {
        let peer = try await PythonPeer.start(scriptPath: peerScript)
        let marked = MarkedQueue()
        let manager = SocketManager(socketURL: URL(string: "http://127.0.0.1:\(peer.port)")!, config: [.handleQueue(marked.queue)])
        #expect(manager.handleQueue === marked.queue)
        let socket = manager.defaultSocket
        let log = Recorder<String>()
        socket.on(clientEvent: .statusChange) { data, _ in
            let status = data.first as? SocketIOStatus
            log.append("statusChange \(status?.description ?? "?") \(data.count > 1 ? "\(data[1])" : "-") \(marked.isCurrent)")
        }
        socket.on(clientEvent: .connect) { data, _ in
            log.append("connect \(data.first as? String ?? "?") \(marked.isCurrent)")
            socket.emitWithAck("echo", "hi", 2).timingOut(after: 10) { items in
                log.append("ack \(items.map { "\($0)" }) \(marked.isCurrent)")
            }
            socket.emit("record", "x", completion: { log.append("completion \(marked.isCurrent)") })
        }
        socket.on("welcome") { _, ack in log.append("welcome \(ack.expected) \(marked.isCurrent)") }
        socket.onAny { event in if event.event == "welcome" { log.append("any welcome \(marked.isCurrent)") } }

        marked.queue.suspend()
        socket.connect()
        // The queue is held: a handler run inside connect() would have logged by now.
        #expect(log.values.isEmpty)
        #expect(socket.status == .connecting)
        marked.queue.resume()

        let values = await log.wait(for: 7, limit: .seconds(20))
        #expect(values.first == "statusChange connecting 2 true")
        #expect(values.contains("statusChange connected 3 true"))
        #expect(values.contains("connect / true"))
        #expect(values.contains("welcome false true"))
        #expect(values.contains("any welcome true"))
        #expect(values.contains("ack [\"hi\", \"2\"] true") || values.contains("ack [hi, 2] true"), "\(values)")
        #expect(values.contains("completion true"))
        manager.disconnect()
        await peer.stop()
    }

    @Test("the default handleQueue is the main queue; a @MainActor model's [weak self] handler runs on main")
    func defaultQueueIsMain() async throws {
        let peer = try await PythonPeer.start(scriptPath: peerScript)
        let manager = SocketManager(socketURL: URL(string: "http://127.0.0.1:\(peer.port)")!)
        #expect(manager.handleQueue.getSpecific(key: mainQueueKey) == 1)
        let socket = manager.defaultSocket
        let model = WelcomeModel()
        await model.attach(to: socket)
        socket.connect()
        let seen = await model.seen.wait(for: 1, limit: .seconds(20))
        #expect(seen == [true])
        let welcomed = await model.welcomed
        #expect(welcomed.first?.isEmpty == false)
        manager.disconnect()
        await peer.stop()
    }

    @Test("a drop: statusChange [connecting, 2] and reconnect [reason] when reconnecting begins, reconnectAttempt counts down, giving up is disconnect [\"Reconnect Failed\"]")
    func reconnectEvents() async throws {
        let peer = try await PythonPeer.start(scriptPath: peerScript)
        let marked = MarkedQueue()
        let manager = SocketManager(socketURL: URL(string: "http://127.0.0.1:\(peer.port)")!, config: [
            .handleQueue(marked.queue), .forceWebsockets(true), .reconnectAttempts(2), .reconnectWait(1), .reconnectWaitMax(1),
        ])
        let socket = manager.defaultSocket
        let log = Recorder<String>()
        let stopped = Recorder<Int>()
        socket.on(clientEvent: .disconnect) { _, _ in stopped.append(1) }
        for event in [SocketClientEvent.statusChange, .connect, .disconnect, .reconnect, .reconnectAttempt] {
            socket.on(clientEvent: event) { data, _ in
                let items = data.map { item -> String in
                    if let status = item as? SocketIOStatus { return "SocketIOStatus.\(status)" }
                    return "\(item)"
                }
                log.append("\(event.rawValue) \(items.joined(separator: ",")) \(marked.isCurrent)")
            }
        }
        socket.connect()
        #expect(await log.wait(for: 3, limit: .seconds(20)).contains { $0.hasPrefix("connect /") && $0.hasSuffix(" true") })
        await peer.killAbruptly()
        await stopped.wait(for: 1, limit: .seconds(40))
        // The disconnect handler registered first has run; the logging one runs right after it.
        await log.wait(for: 9, limit: .seconds(5))
        let values = log.values
        let reconnect = try #require(values.firstIndex { $0.hasPrefix("reconnect ") }, "\(values)")
        let connecting = try #require(values.lastIndex(of: "statusChange SocketIOStatus.connecting,2 true"), "\(values)")
        let first = try #require(values.firstIndex(of: "reconnectAttempt 2 true"), "\(values)")
        let second = try #require(values.firstIndex(of: "reconnectAttempt 1 true"), "\(values)")
        let gaveUp = try #require(values.firstIndex(of: "disconnect Reconnect Failed true"), "\(values)")
        #expect(connecting < reconnect && reconnect < first && first < second && second < gaveUp, "\(values)")
        #expect(values[reconnect] != "reconnect  true", "the reason is given: \(values)")
        #expect(values.contains("statusChange SocketIOStatus.disconnected,1 true"), "\(values)")
        // No disconnect while reconnecting: only the final one.
        #expect(values.filter { $0.hasPrefix("disconnect ") }.count == 1, "\(values)")
        #expect(socket.status == .disconnected)
    }

    @Test("once, once(clientEvent:), off and removeAllHandlers; manager.reconnect() raises reconnect [\"manual reconnect\"]")
    func onceOffAndRemoveAll() async throws {
        let peer = try await PythonPeer.start(scriptPath: peerScript)
        let marked = MarkedQueue()
        let manager = SocketManager(socketURL: URL(string: "http://127.0.0.1:\(peer.port)")!, config: [.handleQueue(marked.queue)])
        let socket = manager.defaultSocket
        let ticks = Recorder<String>()
        let connects = Recorder<String>()
        socket.on("tick") { data, _ in ticks.append("on \(data[0])") }
        socket.once("tick") { data, _ in ticks.append("once \(data[0])") }
        socket.once(clientEvent: .connect) { _, _ in connects.append("once") }
        socket.on(clientEvent: .connect) { _, _ in connects.append("on") }
        socket.on(clientEvent: .reconnect) { data, _ in connects.append("reconnect \(data.first as? String ?? "?")") }
        socket.connect()
        #expect(await connects.wait(for: 2, limit: .seconds(20)).sorted() == ["on", "once"])

        socket.emit("count", 3)
        let three = await ticks.wait(for: 4)
        #expect(three.filter { $0.hasPrefix("once") } == ["once 1"], "\(three)")
        #expect(three.filter { $0.hasPrefix("on ") }.count == 3)

        socket.off("tick")
        socket.on("tick") { data, _ in ticks.append("after off \(data[0])") }
        socket.emit("count", 2)
        let afterOff = await ticks.wait(for: 6)
        #expect(Array(afterOff.dropFirst(4)) == ["after off 1", "after off 2"], "\(afterOff)")

        manager.reconnect()
        let reconnected = await connects.wait(for: 4, limit: .seconds(20))
        #expect(Array(reconnected.dropFirst(2)) == ["reconnect manual reconnect", "on"], "\(reconnected)")

        socket.removeAllHandlers()
        let id = socket.on("tick") { data, _ in ticks.append("final \(data[0])") }
        socket.emit("count", 1)
        let final = await ticks.wait(for: 7)
        #expect(final.last == "final 1" && final.count == 7, "\(final)")
        socket.off(id: id)
        manager.disconnect()
        await peer.stop()
    }

    @Test("a pending ack's timingOut(after:) answers NO ACK when its time is up, also across a drop; after: 0 waits for ever")
    func ackTimeoutCountsAcrossADrop() async throws {
        let peer = try await PythonPeer.start(scriptPath: peerScript)
        let marked = MarkedQueue()
        let manager = SocketManager(socketURL: URL(string: "http://127.0.0.1:\(peer.port)")!, config: [
            .handleQueue(marked.queue), .forceWebsockets(true), .reconnectWait(1),
        ])
        let socket = manager.defaultSocket
        let connected = Recorder<Int>()
        let answers = Recorder<String>()
        socket.on(clientEvent: .connect) { _, _ in connected.append(1) }
        socket.connect()
        await connected.wait(for: 1, limit: .seconds(20))

        let sent = ContinuousClock.now
        marked.queue.sync {
            socket.emitWithAck("stall").timingOut(after: 3) { data in
                answers.append("three \(data.first as? String == SocketAckStatus.noAck.rawValue) \(marked.isCurrent)")
            }
            socket.emitWithAck("stall").timingOut(after: 0) { data in answers.append("zero \(data)") }
        }
        await peer.killAbruptly()
        let first = await answers.wait(for: 1, limit: .seconds(10))
        let elapsed = ContinuousClock.now - sent
        #expect(first == ["three true true"])
        #expect(elapsed >= .milliseconds(2900), "NO ACK came \(elapsed) after the emit, before its 3 s")
        // Nothing to await: this checks that the after: 0 callback does not come.
        try await Task.sleep(for: .seconds(1))
        #expect(answers.values == ["three true true"])
        manager.disconnect()
    }
    @Test("connect(timeoutAfter:) leaves the namespace and calls its handler on handleQueue; an emit while not connected raises error and still completes")
    func connectTimeoutAndOfflineEmit() async throws {
        let marked = MarkedQueue()
        // Nothing listens on port 9 (discard) here: the connection is refused and retried.
        let manager = SocketManager(socketURL: URL(string: "http://127.0.0.1:9")!, config: [.handleQueue(marked.queue), .reconnectWait(1)])
        let socket = manager.defaultSocket
        let log = Recorder<String>()
        socket.on(clientEvent: .error) { data, _ in log.append("error \(data.first as? String ?? "?") \(marked.isCurrent)") }
        socket.on(clientEvent: .disconnect) { data, _ in log.append("disconnect \(data.first as? String ?? "?") \(marked.isCurrent)") }
        socket.emit("early", 1, completion: { log.append("completion \(marked.isCurrent)") })
        let offline = await log.wait(for: 2, limit: .seconds(10))
        #expect(offline == ["error Tried emitting when not connected true", "completion true"])

        let started = ContinuousClock.now
        let done = Recorder<Int>()
        socket.connect(timeoutAfter: 0.5) {
            log.append("timed out \(marked.isCurrent) \(socket.status)")
            done.append(1)
        }
        await done.wait(for: 1, limit: .seconds(10))
        // The refused connection also raised error events (as the original's engine errors do).
        let values = log.values
        #expect(ContinuousClock.now - started >= .milliseconds(450))
        let leave = values.firstIndex(of: "disconnect Namespace leave true")
        let handler = values.firstIndex(of: "timed out true disconnected")
        #expect(leave != nil && handler != nil && leave! < handler!, "\(values)")
        manager.disconnect()
    }
    @Test("ping [] per server ping, websocketUpgrade then pong after the upgrade, disconnect [\"Got Disconnect\"] and [\"Disconnect\"]")
    func pingUpgradeAndDisconnectReasons() async throws {
        // Pings every 0.3 s, so that a few come within the test.
        let peer = try await PythonPeer.start(scriptPath: peerScript, arguments: ["0", "0.3", "5"])
        let marked = MarkedQueue()
        let manager = SocketManager(socketURL: URL(string: "http://127.0.0.1:\(peer.port)")!, config: [.handleQueue(marked.queue), .reconnects(false)])
        let socket = manager.defaultSocket
        let log = Recorder<String>()
        let pings = Recorder<Int>()
        let stopped = Recorder<String>()
        socket.on(clientEvent: .ping) { data, _ in pings.append(data.count) }
        let all = Recorder<String>()
        socket.onAny { event in all.append(event.event) }
        socket.on(clientEvent: .websocketUpgrade) { data, _ in log.append("websocketUpgrade \(data.first is [String: String]) \(marked.isCurrent)") }
        socket.on(clientEvent: .pong) { data, _ in log.append("pong \(data.count) \(marked.isCurrent)") }
        socket.on(clientEvent: .disconnect) { data, _ in stopped.append(data.first as? String ?? "?") }
        socket.connect()
        let upgrade = await log.wait(for: 2, limit: .seconds(20))
        #expect(upgrade == ["websocketUpgrade true true", "pong 0 true"], "\(upgrade) \(all.values)")
        #expect(await pings.wait(for: 2, limit: .seconds(10)) == [0, 0], "\(all.values)")

        socket.emit("disconnect_me")
        #expect(await stopped.wait(for: 1, limit: .seconds(10)) == ["Got Disconnect"])
        #expect(socket.status == .disconnected)

        let connected = Recorder<Int>()
        socket.on(clientEvent: .connect) { _, _ in connected.append(1) }
        socket.connect()
        await connected.wait(for: 1, limit: .seconds(20))
        manager.disconnect()
        #expect(await stopped.wait(for: 2, limit: .seconds(10)).last == "Disconnect")
        #expect(manager.status == .disconnected)
        await peer.stop()
    }
}
