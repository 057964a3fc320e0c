import DequeModule
import Foundation
import NIOConcurrencyHelpers
import OrderedCollections
import SocketIOEngine

/// One Engine.IO session on ``SocketIOTestServer``, with the Socket.IO sockets it carries.
final class ServerEngineSession: Sendable {
    struct ServerSocket: Sendable {
        var sid: String
        var pid: String?
        var auth: JSONValue?
    }

    private struct State {
        var queue: Deque<EngineIOPacket> = []
        var pollWaiter: CheckedContinuation<Void, Never>?
        var polling = false
        var webSocket: AsyncStream<EngineIOPacket>.Continuation?
        var closed = false
        /// Ended by a simulated crash: a pending GET fails instead of getting a close packet.
        var dropped = false
        /// The WebSocket close code and reason to end with (nil: 1000).
        var closeCode: (code: UInt16, reason: String?)?
        var pongSeen = true
        var sockets: [String: ServerSocket] = [:]
        var decoder = SocketIOPacketDecoder()
        var nextAckID = 0
        var acks: [Int: CheckedContinuation<[JSONValue], Never>] = [:]
        var heartbeat: Task<Void, Never>?
        /// During an upgrade (`SocketIOTestServer.ProbeAnswer.afterPollAnswered`): every GET is
        /// answered with a noop at once, as the reference servers answer them.
        var noopEveryPoll = false
        /// Whether `3probe` has gone out (GETs before it are counted).
        var probeAnswered = false
    }

    let sid: String
    private weak let server: SocketIOTestServer?
    private let state = NIOLockedValueBox(State())

    init(server: SocketIOTestServer, sid: String) {
        self.server = server
        self.sid = sid
    }

    // MARK: Engine.IO

    func startHeartbeat() {
        guard let server else { return }
        let interval = server.options.pingInterval
        let timeout = server.options.pingTimeout
        // The session's pings, cancelled when the session ends.
        let task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard let self, let server = self.server else { return }
                if server.state.withLockedValue({ $0.pingsPaused }) { continue }
                self.state.withLockedValue { $0.pongSeen = false }
                self.send(EngineIOPacket(.ping))
                // The next ping goes pingInterval after the pong (as the Node server schedules it),
                // so the client sees one at least every pingInterval + round trip.
                let deadline = ContinuousClock.now + timeout
                while !self.state.withLockedValue({ $0.pongSeen }) && ContinuousClock.now < deadline && !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(5))
                }
                if !self.state.withLockedValue({ $0.pongSeen }) {
                    self.terminate()
                    return
                }
            }
        }
        state.withLockedValue { $0.heartbeat = task }
    }

    func send(_ packet: EngineIOPacket) { send([packet]) }

    /// Queues packets for the client, in order (WebSocket or the next poll).
    func send(_ packets: [EngineIOPacket]) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            if state.closed { return nil }
            if let webSocket = state.webSocket {
                for packet in packets { webSocket.yield(packet) }
                return nil
            }
            state.queue.append(contentsOf: packets)
            defer { state.pollWaiter = nil }
            return state.pollWaiter
        }
        waiter?.resume()
    }

    /// Answers one GET: waits until something is queued. Nil for a second concurrent GET or a closed session.
    func poll() async -> String? {
        guard let server else { return nil }
        let concurrent = state.withLockedValue { state -> Bool in
            if state.polling { return true }
            state.polling = true
            return false
        }
        if concurrent {
            terminate()
            return nil
        }
        enum Step { case batch([EngineIOPacket]), upgradeNoop(beforeProbeAnswer: Bool), closed, dropped, wait }
        while true {
            let step = state.withLockedValue { state -> Step in
                if state.closed {
                    state.polling = false
                    return state.dropped ? .dropped : .closed
                }
                if state.queue.isEmpty, state.noopEveryPoll {
                    // Not the GET that was out before the probe (that one takes the queued noop).
                    state.polling = false
                    return .upgradeNoop(beforeProbeAnswer: !state.probeAnswered)
                }
                guard !state.queue.isEmpty else { return .wait }
                var batch: [EngineIOPacket] = []
                var size = 0
                while let first = state.queue.first {
                    let encoded = first.pollingSize + 1  // + the record separator
                    if !batch.isEmpty && size + encoded > server.options.maxPayload { break }
                    batch.append(state.queue.removeFirst())
                    size += encoded
                }
                state.polling = false
                return .batch(batch)
            }
            switch step {
            case .batch(let batch): return EngineIOCodec.encodePayload(batch)
            case .upgradeNoop(let beforeProbeAnswer):
                if beforeProbeAnswer { server.state.withLockedValue { $0.pollsBeforeProbeAnswer += 1 } }
                return EngineIOCodec.encodePayload([EngineIOPacket(.noop)])
            case .closed: return EngineIOCodec.encodePayload([EngineIOPacket(.close)])
            // A crash: the request fails as it would against a restarted server (unknown sid).
            case .dropped: return nil
            case .wait:
                await withCheckedContinuation { continuation in
                    let resumeNow = state.withLockedValue { state -> Bool in
                        if state.closed || !state.queue.isEmpty { return true }
                        state.pollWaiter = continuation
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            }
        }
    }

    /// The session ended (closed by either side or by the server's stop).
    var isClosed: Bool { state.withLockedValue { $0.closed } }

    /// During an upgrade: end the pending GET with a noop. With `everyPoll`, every later GET of
    /// the upgrade is answered with a noop at once too (python-engineio answers them so, engine.io
    /// repeats a noop every 100 ms), and those that come before `3probe` has gone out
    /// (``probeAnswerSent()``) are counted in ``SocketIOTestServer/pollsBeforeProbeAnswer``.
    func flushPollWithNoop(everyPoll: Bool = false) {
        if everyPoll { state.withLockedValue { $0.noopEveryPoll = true } }
        send(EngineIOPacket(.noop))
    }

    /// `3probe` goes out now.
    func probeAnswerSent() { state.withLockedValue { $0.probeAnswered = true } }

    /// Moves the session to WebSocket: what is still queued goes first.
    func attachWebSocket() -> AsyncStream<EngineIOPacket> {
        let (stream, continuation) = AsyncStream.makeStream(of: EngineIOPacket.self)
        let (waiter, closed) = state.withLockedValue { state -> (CheckedContinuation<Void, Never>?, Bool) in
            for packet in state.queue { continuation.yield(packet) }
            state.queue = []
            state.noopEveryPoll = false
            state.webSocket = continuation
            defer { state.pollWaiter = nil }
            return (state.pollWaiter, state.closed)
        }
        waiter?.resume()
        if closed { continuation.finish() }
        return stream
    }

    /// Ends the session. With `dropped`, as a crash would: no Engine.IO close packet anywhere (a
    /// pending GET fails with 400, a WebSocket just closes). Otherwise a pending GET gets a close packet.
    func terminate(dropped: Bool = false, closeCode: (code: UInt16, reason: String?)? = nil) {
        let (waiter, webSocket, heartbeat, acks, wasClosed) = state.withLockedValue { state in
            let wasClosed = state.closed
            state.closed = true
            if !wasClosed {
                state.dropped = dropped
                state.closeCode = closeCode
            }
            defer {
                state.pollWaiter = nil
                state.acks = [:]
            }
            return (state.pollWaiter, state.webSocket, state.heartbeat, state.acks, wasClosed)
        }
        if wasClosed { return }
        waiter?.resume()
        webSocket?.finish()
        heartbeat?.cancel()
        for ack in acks.values { ack.resume(returning: []) }
        server?.sessionEnded(self)
    }

    /// The code and reason the WebSocket closes with when the session ends (1000 unless
    /// ``terminate(dropped:closeCode:)`` named one).
    var closeCode: (code: UInt16, reason: String?) { state.withLockedValue { $0.closeCode } ?? (1000, nil) }

    func received(_ packet: EngineIOPacket) async {
        switch packet.type {
        case .pong:
            state.withLockedValue { $0.pongSeen = true }
            server?.state.withLockedValue { $0.pongsReceived += 1 }
        case .close: terminate()
        case .message:
            do {
                let decoded: SocketIOPacket?
                switch packet.payload {
                case .text(let text): decoded = try state.withLockedValue { try $0.decoder.receive(text: text) }
                case .binary(let data): decoded = try state.withLockedValue { try $0.decoder.receive(binary: data) }
                case .none: decoded = nil
                }
                if let decoded { await handle(decoded) }
            } catch {
                terminate()
            }
        default: break
        }
    }

    // MARK: Socket.IO

    func recoverableSockets() -> [(pid: String, namespace: String, sid: String)] {
        state.withLockedValue { state in
            state.sockets.compactMap { namespace, socket in socket.pid.map { ($0, namespace, socket.sid) } }
        }
    }

    private func sendPacket(_ packet: SocketIOPacket) {
        send(SocketIOCodec.encode(packet).engineIOPackets)
    }

    func emit(namespace: String, event: String, arguments: [JSONValue], ackID: Int? = nil) {
        sendPacket(SocketIOPacket(type: .event, namespace: namespace, id: ackID, data: .array([.string(event)] + arguments)))
    }

    func emitIfConnected(namespace: String, event: String, arguments: [JSONValue]) {
        guard state.withLockedValue({ $0.sockets[namespace] != nil }) else { return }
        emit(namespace: namespace, event: event, arguments: arguments)
    }

    /// Emits with an ack id and waits for the client's answer (empty if the session ends first).
    func call(namespace: String, event: String, arguments: [JSONValue]) async -> [JSONValue] {
        await withCheckedContinuation { continuation in
            let id = state.withLockedValue { state -> Int in
                let id = state.nextAckID
                state.nextAckID += 1
                state.acks[id] = continuation
                return id
            }
            emit(namespace: namespace, event: event, arguments: arguments, ackID: id)
        }
    }

    private func handle(_ packet: SocketIOPacket) async {
        guard let server else { return }
        let namespace = packet.namespace
        switch packet.type {
        case .connect:
            connect(namespace: namespace, data: packet.data, server: server)
        case .disconnect:
            state.withLockedValue { _ = $0.sockets.removeValue(forKey: namespace) }
        case .event, .binaryEvent:
            guard state.withLockedValue({ $0.sockets[namespace] != nil }),
                let arguments = packet.data?.arrayValue, let name = arguments.first?.stringValue
            else { return }
            server.state.withLockedValue { $0.events.append((namespace, name, Array(arguments.dropFirst()))) }
            await event(name, Array(arguments.dropFirst()), namespace: namespace, ackID: packet.id, server: server)
        case .ack, .binaryAck:
            guard let id = packet.id, let continuation = state.withLockedValue({ $0.acks.removeValue(forKey: id) }) else { return }
            continuation.resume(returning: packet.data?.arrayValue ?? [])
        case .connectError:
            terminate()
        }
    }

    private func connect(namespace: String, data: JSONValue?, server: SocketIOTestServer) {
        switch namespace {
        case "/": break
        case "/chat":
            guard data?["token"] == "secret" else {
                sendPacket(SocketIOPacket(type: .connectError, namespace: namespace, data: ["message": "bad token"]))
                return
            }
        default:
            sendPacket(SocketIOPacket(type: .connectError, namespace: namespace, data: ["message": "Invalid namespace"]))
            return
        }
        var socket = ServerSocket(sid: SocketIOTestServer.makeID(), pid: nil, auth: data)
        // Joining the namespace and replaying what it missed happen as one step against
        // broadcasts: a broadcast between the two would reach the client before older missed ones.
        server.broadcastLock.withLock {
            var replay: [[JSONValue]] = []
            if server.options.connectionStateRecovery {
                if let pid = data?["pid"]?.stringValue,
                    let missed = server.missedBroadcasts(namespace: namespace, after: data?["offset"]?.stringValue),
                    let recovery = server.takeRecovery(pid: pid, namespace: namespace) {
                    socket.sid = recovery.sid
                    socket.pid = pid
                    replay = missed
                } else {
                    socket.pid = SocketIOTestServer.makeID()
                }
            }
            state.withLockedValue { $0.sockets[namespace] = socket }
            // Missed packets go before the CONNECT reply, as socket.io 4.6+ sends them.
            for arguments in replay { emit(namespace: namespace, event: "news", arguments: arguments) }
        }
        server.state.withLockedValue { $0.connectCount += 1 }
        var reply: OrderedDictionary<String, JSONValue> = ["sid": .string(socket.sid)]
        if let pid = socket.pid { reply["pid"] = .string(pid) }
        sendPacket(SocketIOPacket(type: .connect, namespace: namespace, data: .object(reply)))
        if namespace == "/" { emit(namespace: "/", event: "welcome", arguments: [["sid": .string(socket.sid)]]) }
    }

    private func event(_ name: String, _ arguments: [JSONValue], namespace: String, ackID: Int?, server: SocketIOTestServer) async {
        func ack(_ values: [JSONValue]) {
            guard let ackID else { return }
            sendPacket(SocketIOPacket(type: .ack, namespace: namespace, id: ackID, data: .array(values)))
        }
        switch name {
        case "echo": ack(arguments)
        case "size":
            switch arguments.first {
            case .string(let text)?: ack([.number(Double(text.utf8.count))])
            case .binary(let data)?: ack([.number(Double(data.count))])
            default: ack([.null])
            }
        case "whoami": ack([state.withLockedValue { $0.sockets[namespace]?.auth } ?? .null])
        case "echo_event": emit(namespace: namespace, event: "echoed", arguments: arguments)
        case "ask":
            // Waits for the client's answer beside reading (the answer arrives through reading).
            Task {
                let reply = await self.call(namespace: namespace, event: "question", arguments: arguments)
                self.emit(namespace: namespace, event: "answer", arguments: reply)
            }
        case "count":
            for index in 1...max(1, arguments.first?.intValue ?? 1) {
                emit(namespace: namespace, event: "tick", arguments: [.number(Double(index))])
            }
        case "disconnect_me":
            state.withLockedValue { _ = $0.sockets.removeValue(forKey: namespace) }
            sendPacket(SocketIOPacket(type: .disconnect, namespace: namespace))
        case "record":
            server.state.withLockedValue { $0.recorded.append(arguments) }
            ack([])
        case "broadcast":
            server.broadcast("news", arguments, namespace: namespace)
            ack([])
        case "flaky":
            let key = arguments.first?.stringValue ?? ""
            let count = server.state.withLockedValue { state -> Int in
                state.flakyArrivals[key, default: 0] += 1
                return state.flakyArrivals[key]!
            }
            if count >= (arguments.dropFirst().first?.intValue ?? 1) { ack([.integer(Int64(count))]) }
        case "flaky_count":
            let key = arguments.first?.stringValue ?? ""
            ack([.integer(Int64(server.state.withLockedValue { $0.flakyArrivals[key] ?? 0 }))])
        case "late_ack":
            let delay = arguments.first?.intValue ?? 100
            // A late ack on purpose, while the session goes on.
            Task {
                try? await Task.sleep(for: .milliseconds(delay))
                ack(["late"])
            }
        default:
            break
        }
    }
}
