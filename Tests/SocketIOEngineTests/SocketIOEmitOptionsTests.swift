import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// What JavaScript socket.io 4 users reach for beside `emit`: volatile emits, a default ack
/// timeout with `retries` (socket.io-client 4.6's semantics), and `onAnyOutgoing`; against
/// python-socketio 5 and our in-process server.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct SocketIOEmitOptionsTests {
    static func retrying(_ retries: Int, ackTimeout: Duration) -> SocketIOConfiguration {
        var configuration = SocketIOConfiguration.testing([.websocket])
        configuration.retries = retries
        configuration.ackTimeout = ackTimeout
        return configuration
    }

    @Test("volatile emits: sent when connected, dropped (never queued) when not", arguments: ServerUnderTest.allCases)
    func volatileEmits(server: ServerUnderTest) async throws {
        let peer = try await server.start()
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: peer.url, configuration: .testing([.websocket]))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let echoed = Recorder<[JSONValue]>()
        socket.on("echoed") { echoed.append($0.arguments) }
        #expect(try socket.volatile.emit("echo_event", "early") == false)
        #expect(socket.queuedEmitCount == 0)
        try await socket.connect(timeout: .seconds(30))
        #expect(try socket.volatile.emit("echo_event", "live") == true)
        #expect(try await socket.emitWithAck("echo", "sync", timeout: .seconds(30)) == ["sync"])
        #expect(await echoed.wait(for: 1) == [["live"]])
        // Had "early" been queued, it would have gone out first, on connect.
        #expect(try await socket.emitWithAck("echo", "sync again", timeout: .seconds(30)) == ["sync again"])
        #expect(echoed.values == [["live"]])
    }

    @Test("retries: a try left unanswered is sent again until acked", arguments: ServerUnderTest.allCases)
    func retriedUntilAcked(server: ServerUnderTest) async throws {
        let peer = try await server.start()
        defer { Task { await peer.stop() } }
        // Tries to spare: on a loaded machine an answered try's ack can take longer than the ack
        // timeout, and the next try is sent (the server then saw one more, and its ack says so).
        let manager = SocketManager(url: peer.url, configuration: Self.retrying(6, ackTimeout: .seconds(1)))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        let key = UUID().uuidString
        // The server answers from the third arrival on: two tries time out, the third is acked.
        let acked = try await socket.emitWithAck("flaky", key, 3).first?.intValue ?? 0
        #expect((3...7).contains(acked))
        #expect(try await socket.emitWithAck("flaky_count", key, timeout: .seconds(30)) == [.integer(Int64(acked))])
    }

    /// `emitIDs` with `retries`: every try of an emit carries the same id (the packet's ack id
    /// changes from try to try), so a server can tell a second try from a second emit.
    @Test("emit ids: every try of a retried emit carries the emit's one id; the next emit has another")
    func retriedTriesShareTheEmitID() async throws {
        let peer = try await ServerUnderTest.python.start()
        defer { Task { await peer.stop() } }
        var configuration = Self.retrying(6, ackTimeout: .seconds(1))
        configuration.emitIDs = .lastArgument()
        let manager = SocketManager(url: peer.url, configuration: configuration)
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        let (first, second) = (UUID().uuidString, UUID().uuidString)
        // The server answers the first from its third arrival on (two tries time out), the second at once.
        let tries = try await socket.emitWithAck("flaky", first, 3).first?.intValue ?? 0
        #expect((3...7).contains(tries))
        _ = try await socket.emitWithAck("flaky", second, 1)
        let firstIDs = try await socket.emitWithAck("flaky_ids_of", first, timeout: .seconds(30)).first?.arrayValue ?? []
        let secondIDs = try await socket.emitWithAck("flaky_ids_of", second, timeout: .seconds(30)).first?.arrayValue ?? []
        #expect(firstIDs.count == tries, "one id per arrival: \(firstIDs)")
        #expect(Set(firstIDs.map(\.stringValue)).count == 1, "every try, one id: \(firstIDs)")
        let id = try #require(firstIDs.first?.stringValue)
        #expect(id.wholeMatch(of: /[0-9a-z]+-[0-9]+/) != nil, "\(id)")
        #expect(secondIDs.count == 1 && secondIDs.first?.stringValue != id, "\(secondIDs) after \(id)")
    }

    @Test("retries: out of tries, emitWithAck fails with the timeout and a plain emit is reported dropped", arguments: ServerUnderTest.allCases)
    func outOfTries(server: ServerUnderTest) async throws {
        let peer = try await server.start()
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: peer.url, configuration: Self.retrying(2, ackTimeout: .milliseconds(500)))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let dropped = Recorder<[JSONValue]>()
        socket.on(clientEvent: .dropped) { dropped.append($0.arguments) }
        let resent = Recorder<JSONValue>()
        socket.on(clientEvent: .resent) { for emit in $0.arguments { resent.append(emit) } }
        try await socket.connect(timeout: .seconds(30))
        let key = UUID().uuidString
        await #expect {
            _ = try await socket.emitWithAck("flaky", key, 100)
        } throws: { error in
            (error as? RealtimeError)?.code == .timeout
        }
        // One try and two retries reached the server.
        #expect(try await socket.emitWithAck("flaky_count", key, timeout: .seconds(30)) == [3])

        let plain = UUID().uuidString
        try socket.emit("flaky", arguments: [.string(plain), 100])
        let report = await dropped.wait(for: 1, limit: .seconds(20))
        // Tries went out and got no ack: the server may have handled it.
        #expect(report.first == [["event": "flaky", "data": [.string(plain), 100], "tries": 3, "delivery": "possiblySent"]])
        #expect(socket.droppedEmitCount == 1)
        #expect(try await socket.emitWithAck("flaky_count", plain, timeout: .seconds(30)) == [3])
        // Every try after the first is named by a resent event: two for each emit.
        let expectedResent: [JSONValue] = [
            ["event": "flaky", "data": [.string(key), 100], "tries": 2], ["event": "flaky", "data": [.string(key), 100], "tries": 3],
            ["event": "flaky", "data": [.string(plain), 100], "tries": 2], ["event": "flaky", "data": [.string(plain), 100], "tries": 3],
        ]
        #expect(resent.values == expectedResent)
        #expect(socket.deliveryCounts == SocketIODeliveryCounts(notSent: 0, possiblySent: 1, resent: 4))
    }

    @Test("retries: one emit in flight per socket, in order", arguments: ServerUnderTest.allCases)
    func oneInFlightInOrder(server: ServerUnderTest) async throws {
        let peer = try await server.start()
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: peer.url, configuration: Self.retrying(3, ackTimeout: .seconds(1)))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        let key = UUID().uuidString
        // A plain emit that needs two tries, then a count: the count goes out only once the emit
        // was acked, so it sees both tries (more if an ack came after the 1 s ackTimeout, which a
        // loaded machine does: at most the 4 tries that 3 retries allow).
        try socket.emit("flaky", arguments: [.string(key), 2])
        let count = try await socket.emitWithAck("flaky_count", key, timeout: .seconds(30)).first?.intValue ?? 0
        #expect((2...4).contains(count), "the count saw \(count) tries")
    }

    /// A try the connection drop cut (written, no ack yet) is sent again after the reconnect: it
    /// counts as a try, and the server sees it twice.
    @Test("retries: a try cut by a drop is sent again after the reconnect")
    func triesSurviveADrop() async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: Self.retrying(2, ackTimeout: .seconds(20)))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let connects = Recorder<Int>()
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        try await socket.connect(timeout: .seconds(30))
        let key = UUID().uuidString
        let started = ContinuousClock.now
        async let answer = socket.emitWithAck("flaky", key, 2)
        try await waitUntil("the first try reached the server") { server.receivedEvents.contains { $0.name == "flaky" } }
        server.dropAllConnections()
        #expect(try await answer == [2])
        // Sent again at the reconnect, not after the 20 s ack timeout.
        #expect(ContinuousClock.now - started < .seconds(15))
        #expect(connects.values.count == 2)
    }

    /// JS semantics while offline: no retry timer runs and no try is counted. A try cut by a drop
    /// (written, unanswered) and five emits waiting behind it stay put while the server cannot be
    /// reached for longer than the ack timeout; after the reconnect each goes out once and is acked.
    @Test("retries: while offline no try runs out; after the reconnect every emit is sent once and acked")
    func retriesWaitOutAnOutage() async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        var configuration = SocketIOConfiguration.testing([.websocket])
        configuration.retries = 1
        configuration.ackTimeout = .seconds(2)
        let manager = SocketManager(url: proxy.url(), configuration: configuration)
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let resent = Recorder<JSONValue>()
        socket.on(clientEvent: .resent) { for emit in $0.arguments { resent.append(emit) } }
        try await socket.connect(timeout: .seconds(30))
        let keys = (0..<6).map { _ in UUID().uuidString }
        // The first is answered from its second arrival on: its first try is cut unanswered. The
        // others join the queue behind it one by one (each task is started once the one before
        // is queued), so the queue's order is the keys' order.
        var answers: [Task<[JSONValue], any Error>] = []
        for (index, key) in keys.enumerated() {
            answers.append(Task { try await socket.emitWithAck("flaky", key, index == 0 ? 2 : 1) })
            try await waitUntil("emit \(index) joined the retry queue") { socket.retryQueueCount == index + 1 }
        }
        try await waitUntil("the first try reached the server") { server.receivedEvents.contains { $0.name == "flaky" } }
        await proxy.refuseConnections()
        proxy.cutAll(.reset)
        try await waitUntil("the drop was noticed") { socket.status != .connected }
        // Nothing to await: the point is that nothing happens while offline for longer than the
        // 2 s ack timeout (a try started offline would time out in it, with no tries left).
        try await Task.sleep(for: .seconds(3))
        try await proxy.acceptConnections()
        for (index, answer) in answers.enumerated() {
            #expect(try await answer.value == [index == 0 ? 2 : 1], "emit \(index)")
        }
        // Receipts on the server: the cut try and its one retry, then each other emit once.
        for (index, key) in keys.enumerated() {
            #expect(try await socket.emitWithAck("flaky_count", key, timeout: .seconds(30)) == [index == 0 ? 2 : 1], "emit \(index)")
        }
        #expect(resent.values == [["event": "flaky", "data": [.string(keys[0]), 2], "tries": 2]])
        #expect(socket.deliveryCounts.resent == 1)
    }

    @Test("onAnyOutgoing: every event as it goes to the connection, queued ones when flushed, acks not")
    func anyOutgoing() async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket]))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let outgoing = Recorder<[JSONValue]>()
        let id = socket.onAnyOutgoing { outgoing.append([.string($0.event)] + $0.arguments) }
        socket.on("question") { $0.ack("answered") }
        let answers = Recorder<[JSONValue]>()
        socket.on("answer") { answers.append($0.arguments) }
        try socket.emit("record", arguments: ["queued", .binary(Data([7]))])
        #expect(outgoing.values.isEmpty, "a queued emit is not out yet")
        try await socket.connect(timeout: .seconds(30))
        try await waitUntil("the queued emit went out") { outgoing.values.count == 1 }
        try socket.emit("ask", arguments: ["q"])
        _ = await answers.wait(for: 1)
        #expect(try socket.volatile.emit("record", "volatile"))
        #expect(try await socket.emitWithAck("echo", 1) == [1])
        // The queued emit with its binary attachment in place; the ack to "question" is not an event.
        #expect(outgoing.values == [["record", "queued", .binary(Data([7]))], ["ask", "q"], ["record", "volatile"], ["echo", 1]])
        socket.off(id: id)
        try socket.emit("record", arguments: ["after off"])
        #expect(try await socket.emitWithAck("echo", 2) == [2])
        #expect(outgoing.values.count == 4)
    }
}
