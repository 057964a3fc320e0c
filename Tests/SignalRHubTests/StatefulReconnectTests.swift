import Foundation
import Logging
import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

/// Stateful reconnect through FaultProxy: the WebSocket is cut in the middle of bursts in both
/// directions; after the socket is replaced, every message arrived exactly once, in order, and no
/// pending call failed.
@Suite("Stateful reconnect", .serialized, .timeLimit(.minutes(3)))
struct StatefulReconnectTests {
    @Test("aiosignalr: bursts both ways survive cuts with nothing lost or doubled", arguments: HubProtocolType.allCases)
    func aiosignalrBursts(_ kind: HubProtocolType) async throws {
        let peer = try await PythonPeer.start(scriptPath: signalRPeerScript("aiosignalr_server.py"), arguments: ["stateful"])
        defer { Task { await peer.stop() } }
        let proxy = try await FaultProxy.start(targetPort: peer.port)
        defer { Task { await proxy.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: proxy.url(scheme: "http") + "/hub", transport: .webSockets)
            .withHubProtocol(hubProtocol: kind).withOptions { $0.statefulReconnect = true }.build()
        let items = Recorder<Int>()
        connection.on("item") { (value: Int) in items.append(value) }
        let lifecycle = Recorder<String>()
        connection.onReconnecting { _ in lifecycle.append("reconnecting") }
        connection.onClosed { _ in lifecycle.append("closed") }
        try await connection.start()
        #expect(connection.isStateful)

        // Client to server: 500 invocations in flight; the socket is cut twice while they go out.
        let count = 500
        let results = Task {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<count { group.addTask { try await connection.invoke(method: "record", arguments: index) } }
                var all: [Int] = []
                for try await value in group { all.append(value) }
                return all
            }
        }
        try await cutTwiceMidBurst(proxy, .reset, .reset)
        let values = try await results.value
        #expect(values.sorted() == Array(0..<count))
        let recorded: [Int] = try await connection.invoke(method: "recorded")
        #expect(recorded.count == count, "each invocation ran exactly once on the server")
        #expect(Set(recorded) == Set(0..<count))

        // Server to client: 2,000 invocations, cut after some of them crossed.
        let before = connection.statefulReconnectCount
        #expect(before >= 1)
        proxy.inject(.cutAfter(bytes: 20_000, .both, .reset))
        try await connection.invoke(method: "burst", arguments: 2_000)
        _ = try await items.wait(count: 2_000)
        // A doubled item would come after the last one; its absence has no event to await.
        try await Task.sleep(for: .milliseconds(300))
        // Named deviation (aiosignalr 0.1.1, MessageBuffer.send): a message recorded before the
        // socket dropped but still waiting to be written (for buffer room or the transport lock)
        // is written again after the replay, so the client sees it twice in a row. The protocol has
        // no message ids, so no client can tell that copy from a new message. Our server does not
        // do this (ownServerBursts asserts exactly once); here: none lost, order kept, and any extra
        // copy is the immediate repeat of the item before it, one the server counted as written twice.
        let copies: Int = try await connection.invoke(method: "copies")
        let seen = items.all
        var deduplicated: [Int] = []
        var repeats = 0
        for value in seen {
            if value == deduplicated.last { repeats += 1 } else { deduplicated.append(value) }
        }
        #expect(deduplicated == Array(0..<2_000), "in order, none lost")
        #expect(repeats <= copies, "\(repeats) items came twice, the server wrote \(copies) messages twice")
        #expect(connection.currentState == .connected)
        #expect(lifecycle.all.isEmpty, "a stateful reconnect is invisible: no onReconnecting, no onClosed")
        #expect(connection.statefulReconnectCount > before, "the burst was cut and healed")
        await connection.stop()
    }

    @Test("SignalRTestServer: bursts both ways survive cuts with nothing lost or doubled", arguments: HubProtocolType.allCases)
    func ownServerBursts(_ kind: HubProtocolType) async throws {
        // A loaded full run once saw the client give up the stateful reconnect; if a call fails,
        // the client's log (why each attempt failed) goes with the failure.
        let log = NIOLockedValueBox<[String]>([])
        do {
            try await ownServerBursts(kind, log: log)
        } catch {
            Issue.record("\(error)\nthe client's log, last 80 lines:\n\(log.withLockedValue { $0.suffix(80) }.joined(separator: "\n"))")
        }
    }

    func ownServerBursts(_ kind: HubProtocolType, log: NIOLockedValueBox<[String]>) async throws {
        var options = SignalRTestServer.Options()
        options.statefulReconnect = true
        let server = try await SignalRTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let recorded = NIOLockedValueBox<[Int]>([])
        server.method("record") { call in
            recorded.withLockedValue { $0.append(call.arguments[0].intValue ?? -1) }
            return call.arguments[0]
        }
        server.method("burst", concurrent: true) { [weak server] call in
            for value in 0..<(call.arguments[0].intValue ?? 0) {
                try await server?.invokeClientSend(call.connectionId, "item", [.number(Double(value))])
            }
            return nil
        }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        let logger = Logger(label: "stateful-test") { _ in CapturingLogHandler(lines: log, logLevel: .debug) }
        let connection = HubConnectionBuilder().withUrl(url: proxy.url(scheme: "http") + "/hub", transport: .webSockets)
            .withHubProtocol(hubProtocol: kind).withOptions {
                $0.statefulReconnect = true
                $0.runtime = RealtimeRuntime.shared.logging(to: logger)
            }.build()
        let items = Recorder<Int>()
        connection.on("item") { (value: Int) in items.append(value) }
        let lifecycle = Recorder<String>()
        connection.onReconnecting { _ in lifecycle.append("reconnecting") }
        try await connection.start()
        #expect(connection.isStateful)

        let count = 2_000
        let results = Task {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<count { group.addTask { try await connection.invoke(method: "record", arguments: index) } }
                var all: [Int] = []
                for try await value in group { all.append(value) }
                return all
            }
        }
        try await cutTwiceMidBurst(proxy, .reset, .fin)
        #expect(try await results.value.sorted() == Array(0..<count))
        let seen = recorded.withLockedValue { $0 }
        #expect(seen.count == count, "each invocation ran exactly once")
        #expect(Set(seen) == Set(0..<count))

        let before = server.reattachCount
        #expect(before >= 1)
        proxy.inject(.cutAfter(bytes: 30_000, .both, .reset))
        try await connection.invoke(method: "burst", arguments: 3_000)
        _ = try await items.wait(count: 3_000)
        // A doubled item would come after the last one; its absence has no event to await.
        try await Task.sleep(for: .milliseconds(300))
        #expect(items.all == Array(0..<3_000), "in order, none lost, none doubled")
        #expect(server.reattachCount > before, "the burst was cut and healed")
        // A socket can die between the server's re-attach and the client's resend: the client
        // then counts a failed attempt and tries again, so the server may count more.
        #expect(connection.statefulReconnectCount >= 2)
        #expect(connection.statefulReconnectCount <= server.reattachCount)
        #expect(lifecycle.all.isEmpty)
        await connection.stop()
    }

    /// Sources/SignalRHub/SignalRHub.docc/SignalRGuide.md: sent messages stay in the replay buffer until acknowledged, up to
    /// `statefulReconnectBufferSize` bytes (and the one message that went past it); a send past
    /// that waits, neither buffered nor written. A server that processes everything but holds back
    /// its Acks, and 60 sends of 1 KB against a 20 KB limit, one after the other or all at once:
    /// about 20 complete and reach the server, the rest wait; when the Acks come they all go out,
    /// each once.
    @Test("A peer that holds back its Acks: sends wait at the replay buffer's byte limit, then all go out once", arguments: [false, true])
    func sendsWaitAtTheBufferLimit(concurrently: Bool) async throws {
        var options = SignalRTestServer.Options()
        options.statefulReconnect = true
        let server = try await SignalRTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let limit = 20_000
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets).withOptions {
            $0.statefulReconnect = true
            $0.statefulReconnectBufferSize = limit
        }.build()
        try await connection.start()
        #expect(connection.isStateful)
        server.holdAcknowledgements(true)
        let payload = JSONValue.string(String(repeating: "x", count: 1_000))
        let total = 60
        let completed = NIOLockedValueBox(0)
        let sender = Task {
            if concurrently {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<total {
                        group.addTask {
                            try await connection.sendRaw(method: "void", arguments: [payload])
                            completed.withLockedValue { $0 += 1 }
                        }
                    }
                    try await group.waitForAll()
                }
            } else {
                for _ in 0..<total {
                    try await connection.sendRaw(method: "void", arguments: [payload])
                    completed.withLockedValue { $0 += 1 }
                }
            }
        }
        // Wait until neither count has moved for 1.5 s and 30 samples (the server would have
        // acknowledged after 1 s): "no more sends complete" is an absence, so it is sampled, not
        // awaited. Counting samples as well as time keeps a stall of the whole process (a loaded
        // machine not running this task for a while) from passing for quiet.
        var last = (-1, -1)
        var quietSamples = 0
        var stableSince = ContinuousClock.now
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            let now = (completed.withLockedValue { $0 }, server.receivedTargets.count)
            if now != last {
                last = now
                quietSamples = 0
                stableSince = .now
            } else {
                quietSamples += 1
                if quietSamples >= 30 && ContinuousClock.now - stableSince > .milliseconds(1_500) { break }
            }
            try await Task.sleep(for: .milliseconds(50))  // sampling an absence (see above)
        }
        let waiting = completed.withLockedValue { $0 }
        let atMost = limit / 1_000 + 1
        #expect(waiting >= limit / 1_100 && waiting <= atMost, "sends completed while no Ack came: \(waiting)")
        #expect(server.receivedTargets.count == waiting, "what completed was written, nothing else")
        server.holdAcknowledgements(false)
        try await sender.value
        // A send completes once written; the server reads it a moment later (a repeat run under
        // load checked after a fixed 200 ms and saw 57 of 60). Wait for all, then check none doubled.
        try await waitUntil("the server read every send", limit: .seconds(20)) { server.receivedTargets.count >= total }
        #expect(server.receivedTargets.count == total, "each send arrived once")
        #expect(connection.currentState == .connected)
        await connection.stop()
    }

    /// SignalRGuide.md: the tries are counted across new sockets that drop again within 5 s. A
    /// server that takes each re-attached socket and closes it at once gets four, then the
    /// connection ends and says so (onClosed, the pending call fails): not an endless loop of
    /// re-attaches, each resending the replay buffer.
    @Test("A server that drops every re-attached socket at once: four tries, then the connection ends and says so")
    func reattachedSocketsThatDropAtOnce() async throws {
        let server = try await Self.statefulServerWithAMethodThatNeverAnswers()
        defer { Task { await server.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets)
            .withOptions { $0.statefulReconnect = true }.build()
        let closed = Recorder<String>()
        connection.onClosed { error in closed.append(String(describing: error)) }
        try await connection.start()
        #expect(connection.isStateful)
        let call = try await Self.invokeNever(connection, server)
        server.dropReattachedSockets(true)
        await server.dropAll()
        // 0 + 0.25 + 1 + 2 s of delays; the limit is for a loaded machine.
        let reasons = try await closed.wait(count: 1, within: 60)
        #expect(reasons.first != "nil", "the end says why")
        #expect(await call.value == "connectionClosed")
        #expect(connection.currentState == .stopped)
        #expect((1...4).contains(server.reattachCount), "re-attached \(server.reattachCount) times")
        #expect(connection.statefulReconnectCount <= 4)
    }

    /// SignalRGuide.md: stop() ends the connection whatever it is doing. While the connection
    /// resumes statefully no socket is open: stop() ends it at once, with the resume's attempt that
    /// hangs in the network; a send waiting for the new socket fails, and nothing re-attaches when
    /// the network comes back.
    @Test("stop() while a stateful resume's socket hangs in the network ends the connection; nothing re-attaches afterwards",
          .timeLimit(.minutes(1)))
    func stopDuringAResumeAttempt() async throws {
        let server = try await Self.statefulServerWithAMethodThatNeverAnswers()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        // A handshake timeout far past the test's time limit: stop() must end the hanging attempt,
        // not wait for it to time out.
        let connection = HubConnectionBuilder().withUrl(url: proxy.url(scheme: "http") + "/hub", transport: .webSockets)
            .withOptions {
                $0.statefulReconnect = true
                $0.handshakeTimeout = .seconds(600)
            }.build()
        let lifecycle = Recorder<String>()
        connection.onReconnecting { _ in lifecycle.append("reconnecting") }
        connection.onClosed { error in lifecycle.append("closed \((error as? RealtimeError)?.code.description ?? "nil")") }
        try await connection.start()
        #expect(connection.isStateful)
        let call = try await Self.invokeNever(connection, server)
        // The socket is cut and everything through the proxy stalls: the resume's first attempt
        // (no delay) hangs in the network.
        try await proxy.cutAndStallTheNextAttempt()
        #expect(connection.currentState == .connected, "a resume replaces the socket under a connection that carries on")
        await connection.stop()
        #expect(lifecycle.all == ["closed nil"], "stopped, not reconnecting")
        #expect(connection.currentState == .stopped)
        #expect(await call.value == "cancelled", "the call waiting for the new socket fails")
        proxy.resume()
        // A re-attach let through after stop() would reach the server within this moment; its
        // absence is sampled.
        try await Task.sleep(for: .milliseconds(500))
        // The attempt's upgrade request, on the wire before stop(), may still reach the server when
        // the network comes back; the client does not go on with it.
        #expect(connection.statefulReconnectCount == 0, "no socket took the connection over")
        // The attempt's connection is closed by its cancelled connect; a full test run can delay
        // that past the sampled moment above: waited for (a connection never closed fails here).
        try await waitUntil("the attempt's connection was closed with the connection", limit: .seconds(10)) {
            proxy.statistics.connectionsOpen == 0
        }
        #expect(lifecycle.all == ["closed nil"])
    }

    /// Our server with stateful reconnect, and a hub method `never` that stays pending until the
    /// server stops.
    static func statefulServerWithAMethodThatNeverAnswers() async throws -> SignalRTestServer {
        var options = SignalRTestServer.Options()
        options.statefulReconnect = true
        let server = try await SignalRTestServer.start(options: options)
        server.method("never", concurrent: true) { _ in
            // Pending until the server stops (a stream nobody finishes; cancellation ends the wait).
            let (pending, keepOpen) = AsyncStream<Void>.makeStream()
            for await _ in pending {}
            keepOpen.finish()
            return nil
        }
        return server
    }

    /// Invokes `never` and returns once the server has it: the task's value is how the call ended.
    static func invokeNever(_ connection: HubConnection, _ server: SignalRTestServer) async throws -> Task<String, Never> {
        let call = Task { () -> String in
            do {
                _ = try await connection.invoke(method: "never") as JSONValue?
                return "returned"
            } catch let error as RealtimeError { return "\(error.code)" } catch { return "\(error)" }
        }
        try await waitUntil("the call reached the server") { server.receivedTargets.contains("never") }
        return call
    }

    @Test("Without the server's agreement the option changes nothing: a cut fails pending calls")
    func serverDeclines() async throws {
        let peer = try await PythonPeer.start(scriptPath: signalRPeerScript("aiosignalr_server.py"))
        defer { Task { await peer.stop() } }
        let proxy = try await FaultProxy.start(targetPort: peer.port)
        defer { Task { await proxy.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: proxy.url(scheme: "http") + "/hub", transport: .webSockets)
            .withOptions { $0.statefulReconnect = true }.build()
        try await connection.start()
        #expect(!connection.isStateful)
        let stream = try await connection.streamRaw(method: "countForever", arguments: [])
        let outcome = Task { () -> String in
            do {
                for try await _ in stream {}
                return "ended"
            } catch let error as RealtimeError { return "\(error.code)" } catch { return "\(error)" }
        }
        let before = proxy.statistics.bytesToClient
        try await waitUntil("stream items crossed the proxy") { proxy.statistics.bytesToClient > before }
        proxy.inject(.cut(.reset))
        #expect(await outcome.value == "connectionClosed")
    }
}

/// Cuts the connection once the client has written part of a burst, then cuts its replacement as
/// soon as the proxy accepted it (while the client resends what was not acknowledged).
func cutTwiceMidBurst(_ proxy: FaultProxy, _ first: FaultProxy.CutMode, _ second: FaultProxy.CutMode) async throws {
    let start = proxy.statistics
    try await waitUntil("part of the burst crossed the proxy") { proxy.statistics.bytesToTarget > start.bytesToTarget + 1_000 }
    proxy.inject(.cut(first))
    try await waitUntil("the client reconnected", limit: .seconds(30)) {
        proxy.statistics.connectionsAccepted > start.connectionsAccepted
    }
    proxy.inject(.cut(second))
}
