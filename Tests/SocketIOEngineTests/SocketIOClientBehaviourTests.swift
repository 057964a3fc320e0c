import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// Client behaviour that needs server faults only our in-process server can produce on demand.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct SocketIOClientBehaviourTests {
    @Test("connection state recovery: missed broadcasts are replayed in order, nothing lost or duplicated", arguments: [0, 1])
    func connectionStateRecovery(mode: Int) async throws {
        var options = SocketIOTestServer.Options()
        options.connectionStateRecovery = true
        let server = try await SocketIOTestServer.start(options: options)
        let transports: [EngineIOOptions.Transport] = mode == 0 ? [.websocket] : [.polling]
        let manager = SocketManager(url: server.url, configuration: .testing(transports, upgrade: false))
        let socket = manager.defaultSocket
        let news = Recorder<[JSONValue]>()
        let offsets = Recorder<String?>()
        let javaScriptShape = Recorder<[JSONValue]>()
        let connects = Recorder<Int>()
        socket.on("news") {
            news.append($0.arguments)
            offsets.append($0.offset)
            javaScriptShape.append($0.argumentsWithOffset)
        }
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        try await socket.connect(timeout: .seconds(30))
        let sid = socket.sid
        #expect(socket.recoveryState.pid != nil)
        #expect(!socket.recovered)

        server.broadcast("news", [1])
        await news.wait(for: 1)
        #expect(socket.recoveryState.offset == "1")

        server.dropAllConnections()
        server.broadcast("news", [2])
        server.broadcast("news", [3])
        await connects.wait(for: 2)
        await news.wait(for: 3)
        server.broadcast("news", [4])
        let received = await news.wait(for: 4)
        // The offset is its own property; the JavaScript shape (offset last) stays available.
        #expect(received == [[1], [2], [3], [4]])
        // The handler fills the recorders one after the other: wait for each.
        #expect(await offsets.wait(for: 4) == ["1", "2", "3", "4"])
        #expect(await javaScriptShape.wait(for: 4) == [[1, "1"], [2, "2"], [3, "3"], [4, "4"]])
        #expect(socket.recovered)
        #expect(socket.sid == sid)
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }

    /// The client's heartbeat runs on a manual clock; the server's (real clock) allows 30 s for a
    /// pong, so only the client's deadline can end the session. With 1 s on both real clocks a
    /// repeat run beside two CPU-burning loops saw the server end it first ("transport error"): a
    /// pong that goes through the reader (this test listens for ping events) came after 1 s.
    @Test("no ping within pingInterval + pingTimeout: the session is dead and the client reconnects")
    func heartbeatTimeout() async throws {
        var options = SocketIOTestServer.Options()
        options.pingInterval = .milliseconds(200)
        options.pingTimeout = .seconds(30)
        let server = try await SocketIOTestServer.start(options: options)
        let clock = ManualClock()
        var configuration = SocketIOConfiguration.testing([.websocket])
        configuration.runtime = RealtimeRuntime(clock: clock)
        let manager = SocketManager(url: server.url, configuration: configuration)
        let socket = manager.defaultSocket
        let reasons = Recorder<[JSONValue]>()
        let connects = Recorder<Int>()
        let pings = Recorder<Int>()
        socket.on(clientEvent: .disconnect) { reasons.append($0.arguments) }
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        socket.on(clientEvent: .ping) { _ in pings.append(1) }
        try await socket.connect(timeout: .seconds(30))
        // Pings are answered: the session survives several intervals.
        await pings.wait(for: 3)
        #expect(socket.status == .connected)
        server.pausePings(true)
        // The client's limit is pingInterval + pingTimeout = 30.2 s after the last ping.
        clock.advance(by: .seconds(31))
        let seen = await reasons.wait(for: 1)
        #expect(seen.first == ["ping timeout"], "\(seen)")
        server.pausePings(false)
        // The reconnect waits its backoff (50-200 ms) on the manual clock: move it 5 ms per check
        // (a check a millisecond), slow enough that the new connection's 30 s connect timeout on the
        // same clock leaves it 6 s of real time.
        try await waitUntil("the client reconnected") {
            clock.advance(by: .milliseconds(5))
            return connects.values.count >= 2
        }
        let pingCount = pings.values.count
        await pings.wait(for: pingCount + 2)
        #expect(try await socket.emitWithAck("echo", "alive", timeout: .seconds(20)) == ["alive"])
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }

    /// With no ping handler the server's pings are answered on the event loop (no task wakes for
    /// them) and still count for the heartbeat; once a handler listens, pings go through the reader
    /// and fire ping events. The client's heartbeat runs on a manual clock, so the machine's speed
    /// cannot end a session (with 1 s on a real clock, two busy cores did).
    @Test("pings answered on the event loop keep the session; a ping handler then gets ping events")
    func pingsAnsweredOnTheEventLoop() async throws {
        var options = SocketIOTestServer.Options()
        options.pingInterval = .milliseconds(200)  // the server's own, real clock
        options.pingTimeout = .seconds(30)
        let server = try await SocketIOTestServer.start(options: options)
        let clock = ManualClock()
        var configuration = SocketIOConfiguration.testing([.websocket])
        configuration.runtime = RealtimeRuntime(clock: clock)
        let manager = SocketManager(url: server.url, configuration: configuration)
        let socket = manager.defaultSocket
        let connects = Recorder<Int>()
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        try await socket.connect(timeout: .seconds(30))
        // The client's limit is pingInterval + pingTimeout (30.2 s). Three steps of 15 s, each after
        // a pong went out (the heartbeat is reset before the pong is written): 45 s in all.
        for _ in 0..<3 {
            let pongs = server.pongsReceived
            try await waitUntil("a pong") { server.pongsReceived > pongs }
            clock.advance(by: .seconds(15))
        }
        let pongs = server.pongsReceived
        try await waitUntil("a pong after 45 s") { server.pongsReceived > pongs }
        #expect(connects.values.count == 1, "one session all along: the heartbeat saw every ping")
        #expect(socket.status == .connected)
        let pings = Recorder<Int>()
        socket.on(clientEvent: .ping) { _ in pings.append(1) }
        await pings.wait(for: 2)
        #expect(connects.values.count == 1)
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }

    /// The heartbeat is a deadline in the runtime's timer queue, on the client's clock: with the
    /// server's pings held, the session ends with "ping timeout" once the manual clock passes
    /// pingInterval + pingTimeout, on polling, on the WebSocket, and after an upgrade (when the
    /// polling group has handed the heartbeat over to the WebSocket's reader).
    @Test("no ping within the limit on the client's clock ends the session on every transport",
          arguments: ["polling", "websocket", "upgraded"])
    func heartbeatDeadlineOnTheManualClock(setup: String) async throws {
        var options = SocketIOTestServer.Options()
        options.pingInterval = .milliseconds(200)  // the server's own, real clock
        options.pingTimeout = .seconds(30)
        let server = try await SocketIOTestServer.start(options: options)
        let clock = ManualClock()
        var configuration: SocketIOConfiguration = switch setup {
        case "polling": .testing([.polling], upgrade: false)
        case "websocket": .testing([.websocket])
        default: .testing([.polling, .websocket], upgrade: true)
        }
        configuration.runtime = RealtimeRuntime(clock: clock)
        let manager = SocketManager(url: server.url, configuration: configuration)
        let socket = manager.defaultSocket
        let reasons = Recorder<[JSONValue]>()
        socket.on(clientEvent: .disconnect) { reasons.append($0.arguments) }
        try await socket.connect(timeout: .seconds(30))
        if setup == "upgraded" {
            try await waitUntil("the upgrade to WebSocket") { manager.transport == .websocket }
        }
        server.pausePings(true)
        // The limit is 30.2 s after the last ping; pings that came before the pause were at most
        // at the clock's current time, which has not moved.
        clock.advance(by: .seconds(31))
        let seen = await reasons.wait(for: 1)
        #expect(seen.first == ["ping timeout"], "\(seen)")
        manager.disconnect()
        await manager.waitUntilStopped()
        server.pausePings(false)
        await server.stop()
    }

    /// An emit with an ack made before any connect waits in the offline queue; a `disconnect()`
    /// then has nothing to end (the socket was never asked to connect). Its ack used to be dropped
    /// there without an answer, so its timeout found nothing and the call never returned.
    @Test("disconnect() on a socket never asked to connect keeps a queued emit's ack: it still times out")
    func disconnectBeforeConnectKeepsTheAck() async throws {
        let clock = ManualClock()
        var configuration = SocketIOConfiguration.testing([.websocket])
        configuration.runtime = RealtimeRuntime(clock: clock)
        let manager = SocketManager(url: "http://127.0.0.1:9", configuration: configuration)
        let socket = manager.defaultSocket
        let call = Task { try await socket.emitWithAck("queued", 1, timeout: .seconds(5)) }
        try await waitUntil("the emit is queued") { socket.queuedEmitCount == 1 }
        socket.disconnect()
        #expect(socket.queuedEmitCount == 1, "the emit stays queued for the next connect")
        clock.advance(by: .seconds(6))
        await #expect { _ = try await call.value } throws: { ($0 as? RealtimeError)?.code == .timeout }
    }

    /// A cancelled call fails with `cancelled` at once, not when its timeout (here on a clock that
    /// never moves) runs out; cancelled before it was made, the emit is not even queued.
    @Test("a cancelled emitWithAck fails at once with cancelled, whether cancelled while it waits or before")
    func cancelledEmitWithAck() async throws {
        var configuration = SocketIOConfiguration.testing([.websocket])
        configuration.runtime = RealtimeRuntime(clock: ManualClock())
        let manager = SocketManager(url: "http://127.0.0.1:9", configuration: configuration)
        let socket = manager.defaultSocket
        let waiting = Task { try await socket.emitWithAck("queued", 1, timeout: .seconds(5)) }
        try await waitUntil("the emit is queued") { socket.queuedEmitCount == 1 }
        waiting.cancel()
        await #expect { _ = try await waiting.value } throws: { ($0 as? RealtimeError)?.code == .cancelled }

        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await socket.emitWithAck("never", 2, timeout: .seconds(5))
        }
        await #expect { _ = try await early.value } throws: { ($0 as? RealtimeError)?.code == .cancelled }
        #expect(socket.queuedEmitCount == 1, "only the first emit was queued")
        manager.disconnect()
    }

    @Test("an ack after its timeout is dropped; the next ack is matched correctly")
    func lateAck() async throws {
        let server = try await SocketIOTestServer.start()
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket]))
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        await #expect {
            _ = try await socket.emitWithAck("late_ack", 300, timeout: .milliseconds(100))
        } throws: { ($0 as? RealtimeError)?.code == .timeout }
        // The late ack comes 300 ms after the call; the next emit goes once it has arrived (the
        // server reports no event for having answered, so the test waits past it).
        try await Task.sleep(for: .milliseconds(400))
        #expect(try await socket.emitWithAck("echo", "next", timeout: .seconds(20)) == ["next"])
        #expect(socket.status == .connected)
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }

    @Test("a malformed packet ends the session with a typed protocol error; the client reconnects",
          arguments: ["2[\"unterminated", "9", "51-[\"x\"]"])
    func malformedPacket(raw: String) async throws {
        let server = try await SocketIOTestServer.start()
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket]))
        let socket = manager.defaultSocket
        let errors = Recorder<String>()
        let connects = Recorder<Int>()
        socket.on(clientEvent: .error) { errors.append($0.arguments.first?.stringValue ?? "") }
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        try await socket.connect(timeout: .seconds(30))
        server.injectRawMessage(raw)
        if raw.hasPrefix("51-") {
            // A binary packet waits for its attachment; a text packet instead is the violation.
            server.injectRawMessage("2[\"x\"]")
        }
        let seen = await errors.wait(for: 1)
        #expect(seen.first?.contains("protocolViolation") == true, "\(seen)")
        await connects.wait(for: 2)
        #expect(try await socket.emitWithAck("echo", 1, timeout: .seconds(20)) == [1])
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }

    @Test("polling batches stay within the server's maxPayload and keep their order")
    func pollingBatchesRespectMaxPayload() async throws {
        var options = SocketIOTestServer.Options()
        options.maxPayload = 300
        let server = try await SocketIOTestServer.start(options: options)
        let manager = SocketManager(url: server.url, configuration: .testing([.polling], upgrade: false))
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        let filler = String(repeating: "x", count: 60)
        for index in 0..<40 { try socket.emit("record", arguments: [.number(Double(index)), .string(filler)]) }
        // 30 s: a repeat run beside two burners waited past 10 s for this ack.
        #expect(try await socket.emitWithAck("echo", "last", timeout: .seconds(30)) == ["last"])
        #expect(server.recorded.map { $0.first?.intValue } == Array(0..<40))
        #expect(socket.status == .connected)
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }

    @Test("an auth provider is called again for every CONNECT: the server sees a fresh token after a reconnect")
    func authProviderReevaluatedOnReconnect() async throws {
        let server = try await SocketIOTestServer.start()
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket]))
        let calls = Recorder<Int>()
        let chat = manager.socket(forNamespace: "/chat", auth: .provider {
            let call = calls.values.count + 1
            calls.append(call)
            return ["token": "secret", "call": .number(Double(call))]
        })
        let connects = Recorder<Int>()
        chat.on(clientEvent: .connect) { _ in connects.append(1) }
        try await chat.connect(timeout: .seconds(30))
        #expect(try await chat.emitWithAck("whoami", timeout: .seconds(20)) == [["token": "secret", "call": 1]])
        server.dropAllConnections()
        await connects.wait(for: 2)
        #expect(calls.values == [1, 2])
        #expect(try await chat.emitWithAck("whoami", timeout: .seconds(20)) == [["token": "secret", "call": 2]])
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }

    @Test("an auth provider that throws is reported as an error event; the CONNECT goes without auth and /chat refuses it")
    func authProviderFailure() async throws {
        struct NoToken: Error {}
        let server = try await SocketIOTestServer.start()
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket]))
        let chat = manager.socket(forNamespace: "/chat", auth: .provider { throw NoToken() })
        let errors = Recorder<[JSONValue]>()
        chat.on(clientEvent: .error) { errors.append($0.arguments) }
        do {
            try await chat.connect(timeout: .seconds(30))
            Issue.record("connected without a token")
        } catch let error as RealtimeError {
            #expect(error.code == .refused)
            #expect(error.serverMessage == "bad token")
        }
        let reported = await errors.wait(for: 1)
        #expect(reported.first?.first?.stringValue?.hasPrefix("the auth provider failed") == true, "\(reported)")
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }

    @Test("emits while the connection is down are queued (100 by default) and a full queue is a typed error")
    func offlineQueueLimit() async throws {
        var configuration = SocketIOConfiguration.testing([.websocket])
        configuration.offlineQueueCapacity = 3
        let manager = SocketManager(url: "http://127.0.0.1:1", configuration: configuration)
        let socket = manager.defaultSocket
        // Connecting in the background (the server never answers); the emits below queue meanwhile.
        let connecting = Task { try await socket.connect(timeout: .seconds(60)) }
        defer { connecting.cancel() }
        try await waitUntilConnecting(socket)
        for index in 0..<3 { try socket.emit("record", arguments: [.number(Double(index))]) }
        #expect(throws: RealtimeError.self) { try socket.emit("record", arguments: [3]) }
        #expect(socket.queuedEmitCount == 3)
        manager.disconnect()
        await manager.waitUntilStopped()
        #expect(socket.queuedEmitCount == 3, "nothing queued is dropped by a disconnect")
    }
}

/// Waits until `socket` is connecting (its status says so; woken by the status sequence).
func waitUntilConnecting(_ socket: SocketIOClient) async throws {
    for await status in socket.statusUpdates where status == .connecting { return }
}
