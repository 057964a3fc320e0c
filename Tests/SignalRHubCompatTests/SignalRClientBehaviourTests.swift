import Foundation
import RealtimeTesting
import SignalRClient
import Testing

// SignalRClient's semantics, against aiosignalr (Tests/SignalRHubTests/Peers/aiosignalr_server.py):
// SwiftSignalRClient's callbacks and delegate calls on the callback queue and in its order, its
// auto-reconnect (a failed start retried by the policy), the weak settable delegate, send without a
// completion; the official client's async handlers.

func aioScript() -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("SignalRHubTests/Peers/aiosignalr_server.py").path
}

/// Marks the test's callback queue, to tell from inside a callback which queue runs it.
let callbackKey = DispatchSpecificKey<String>()

func callbackQueue() -> DispatchQueue {
    let queue = DispatchQueue(label: "signalr.callbacks")
    queue.setSpecific(key: callbackKey, value: "callbacks")
    return queue
}

/// Where a callback ran: "queue" on the test's callback queue, "elsewhere" otherwise.
func whereAmI() -> String { DispatchQueue.getSpecific(key: callbackKey) == "callbacks" ? "queue" : "elsewhere" }

/// Records the delegate's calls, each with the queue it ran on.
final class RecordingDelegate: HubConnectionDelegate, @unchecked Sendable {
    let events = Recorder<String>()
    func connectionDidOpen(hubConnection: HubConnection) { events.append("open@\(whereAmI())") }
    func connectionDidFailToOpen(error: any Error) { events.append("failToOpen@\(whereAmI())") }
    func connectionDidClose(error: (any Error)?) { events.append("close(\(error == nil ? "nil" : "error"))@\(whereAmI())") }
    func connectionWillReconnect(error: any Error) { events.append("willReconnect@\(whereAmI())") }
    func connectionDidReconnect() { events.append("didReconnect@\(whereAmI())") }
}

/// A policy that records the contexts it was asked with.
final class RecordingPolicy: ReconnectPolicy, @unchecked Sendable {
    let attempts = Recorder<Int>()
    let intervals: [DispatchTimeInterval]
    init(_ intervals: [DispatchTimeInterval]) { self.intervals = intervals }
    func nextAttemptInterval(retryContext: RetryContext) -> DispatchTimeInterval {
        attempts.append(retryContext.failedAttemptsCount)
        return retryContext.failedAttemptsCount < intervals.count ? intervals[retryContext.failedAttemptsCount] : .never
    }
}

@Suite("SignalRClient behaves as SwiftSignalRClient and the official client", .serialized, .timeLimit(.minutes(3)))
struct SignalRClientBehaviourTests {
    @Test("The default callback queue is the main queue")
    func defaultQueueIsMain() {
        // On Linux each `DispatchQueue.main` is a new wrapper of the one main queue, so the wrappers
        // are not identical objects: the queue's label names it.
        #expect(HubConnectionOptions().callbackQueue.label == DispatchQueue.main.label)
        #expect(DispatchQueue.main.label == "com.apple.main-thread")
    }

    @Test("With the default queue, handlers and completions run on the main queue, where MainActor.assumeIsolated holds")
    func defaultQueueRunsOnMain() async throws {
        // The test process drains the main queue (not necessarily from the main thread): the queue is
        // told by a key set on it.
        let mainKey = DispatchSpecificKey<String>()
        DispatchQueue.main.setSpecific(key: mainKey, value: "main")
        func onMain() -> Bool { DispatchQueue.getSpecific(key: mainKey) == "main" }
        let peer = try await PythonPeer.start(scriptPath: aioScript())
        defer { Task { await peer.stop() } }
        let connection = HubConnectionBuilder(url: URL(string: "http://127.0.0.1:\(peer.port)/hub")!).build()
        let seen = Recorder<String>()
        connection.on(method: "receive") { (user: String, count: Int) in
            MainActor.assumeIsolated { seen.append("receive \(user) \(count) main=\(onMain())") }
        }
        try await connection.start()
        connection.send(method: "broadcast", "zoe", 1) { error in seen.append("sent \(error == nil) main=\(onMain())") }
        let got = try await seen.wait(count: 2)
        #expect(Set(got) == ["sent true main=true", "receive zoe 1 main=true"], "\(got)")
        await connection.stop()
    }

    @Test("Handlers, completions, stream items and delegate calls run on the callback queue, never inside the caller's call")
    func callbacksOnTheQueue() async throws {
        let peer = try await PythonPeer.start(scriptPath: aioScript())
        defer { Task { await peer.stop() } }
        let queue = callbackQueue()
        let delegate = RecordingDelegate()
        let connection = HubConnectionBuilder(url: URL(string: "http://127.0.0.1:\(peer.port)/hub")!)
            .withHubConnectionDelegate(delegate: delegate)
            .withHubConnectionOptions { $0.callbackQueue = queue }
            .build()
        let seen = Recorder<String>()
        connection.on(method: "receive") { (user: String, count: Int) in seen.append("receive \(user) \(count)@\(whereAmI())") }

        // Before the connection opened: the error still comes through the queue, after send returned.
        let returned = Locked(false)
        queue.sync {
            connection.send(method: "broadcast", "early", 0) { error in
                seen.append("early \(error is SignalRError ? "SignalRError" : "other") returned=\(returned.value)@\(whereAmI())")
            }
            returned.value = true
        }
        #expect(try await seen.wait(count: 1) == ["early SignalRError returned=true@queue"])

        viewDidLoad { connection.start() }
        #expect(try await delegate.events.wait(count: 1) == ["open@queue"])

        connection.invoke(method: "add", 40, 2, resultType: Int.self) { result, error in seen.append("add \(result ?? -1) \(error == nil)@\(whereAmI())") }
        #expect(try await seen.wait(count: 2).last == "add 42 true@queue")
        connection.invoke(method: "fail", "bad input") { error in
            if case .hubInvocationError(let message)? = error as? SignalRError {
                seen.append("fail \(message)@\(whereAmI())")
            } else {
                seen.append("fail \(String(describing: error))")
            }
        }
        #expect(try await seen.wait(count: 3).last == "fail bad input@queue")
        // send without a completion.
        connection.send(method: "broadcast", "zoe", 3)
        #expect(try await seen.wait(count: 4).last == "receive zoe 3@queue")

        let items = Recorder<String>()
        _ = connection.stream(method: "countTo", 3, streamItemReceived: { (item: Int) in items.append("\(item)@\(whereAmI())") },
                              invocationDidComplete: { error in items.append("done \(error == nil)@\(whereAmI())") })
        #expect(try await items.wait(count: 4) == ["1@queue", "2@queue", "3@queue", "done true@queue"])

        // A cancelled stream completes with nil.
        let forever = Recorder<String>()
        let handle = connection.stream(method: "countForever", streamItemReceived: { (_: Int) in forever.append("item") },
                                       invocationDidComplete: { error in forever.append("done \(error == nil)") })
        _ = try await forever.wait(count: 2)
        connection.cancelStreamInvocation(streamHandle: handle) { error in forever.append("cancel failed \(error)") }
        try await waitUntil("the cancelled stream completed") { forever.values.contains("done true") }

        viewDidLoad { connection.stop() }
        #expect(try await delegate.events.wait(count: 2) == ["open@queue", "close(nil)@queue"])
    }

    @Test("Delegate calls in SwiftSignalRClient's order: open, will-reconnect, did-reconnect, close")
    func delegateOrderAcrossAReconnect() async throws {
        let peer = try await PythonPeer.start(scriptPath: aioScript())
        defer { Task { await peer.stop() } }
        let proxy = try await FaultProxy.start(targetPort: peer.port)
        defer { Task { await proxy.stop() } }
        let delegate = RecordingDelegate()
        let connection = HubConnectionBuilder(url: URL(string: proxy.url(scheme: "http") + "/hub")!)
            .withAutoReconnect(reconnectPolicy: DefaultReconnectPolicy(retryIntervals: [.milliseconds(0), .milliseconds(500)]))
            .withHubConnectionDelegate(delegate: delegate)
            .withHubConnectionOptions { $0.callbackQueue = callbackQueue() }
            .withPermittedTransportTypes(.webSockets)
            .build()
        viewDidLoad { connection.start() }
        #expect(try await delegate.events.wait(count: 1) == ["open@queue"])
        proxy.inject(.cut(.reset))
        #expect(try await delegate.events.wait(count: 3) == ["open@queue", "willReconnect@queue", "didReconnect@queue"])
        let echoed = Recorder<Int>()
        connection.invoke(method: "echo", 9, resultType: Int.self) { result, _ in echoed.append(result ?? -1) }
        #expect(try await echoed.wait(count: 1) == [9])
        viewDidLoad { connection.stop() }
        #expect(try await delegate.events.wait(count: 4).last == "close(nil)@queue")
    }

    @Test("Calls the close fails reach their completions before connectionDidClose, as in SwiftSignalRClient")
    func pendingCallsFailBeforeClose() async throws {
        let peer = try await PythonPeer.start(scriptPath: aioScript())
        defer { Task { await peer.stop() } }
        let delegate = RecordingDelegate()
        let connection = HubConnectionBuilder(url: URL(string: "http://127.0.0.1:\(peer.port)/hub")!)
            .withHubConnectionDelegate(delegate: delegate)
            .withHubConnectionOptions { $0.callbackQueue = callbackQueue() }
            .build()
        viewDidLoad { connection.start() }
        #expect(try await delegate.events.wait(count: 1) == ["open@queue"])
        let items = Recorder<Int>()
        _ = connection.stream(method: "countForever", streamItemReceived: { (item: Int) in items.append(item) }, invocationDidComplete: { error in
            let cancelled = (error as? SignalRError) == .hubInvocationCancelled
            delegate.events.append("stream ended \(cancelled ? "hubInvocationCancelled" : String(describing: error))@\(whereAmI())")
        })
        _ = try await items.wait(count: 2)
        viewDidLoad { connection.stop() }
        #expect(try await delegate.events.wait(count: 3) == ["open@queue", "stream ended hubInvocationCancelled@queue", "close(nil)@queue"])
    }

    @Test("withAutoReconnect retries a failing start as the policy says, then reports connectionDidFailToOpen alone")
    func failedStartIsRetried() async throws {
        let proxy = try await FaultProxy.start(targetPort: 9)
        defer { Task { await proxy.stop() } }
        await proxy.refuseConnections()
        let policy = RecordingPolicy([.milliseconds(50), .milliseconds(50)])
        let delegate = RecordingDelegate()
        let connection = HubConnectionBuilder(url: URL(string: proxy.url(scheme: "http") + "/hub")!)
            .withAutoReconnect(reconnectPolicy: policy)
            .withHubConnectionDelegate(delegate: delegate)
            .withHubConnectionOptions { $0.callbackQueue = callbackQueue() }
            .build()
        viewDidLoad { connection.start() }
        #expect(try await delegate.events.wait(count: 1) == ["failToOpen@queue"])
        #expect(policy.attempts.values == [0, 1, 2])
        // Nothing else comes: no willReconnect for a start.
        // Waits a moment in which no other delegate call may arrive (nothing to await for an absence).
        try await Task.sleep(for: .milliseconds(300))
        #expect(delegate.events.values == ["failToOpen@queue"])
    }

    @Test("The delegate is settable and held weakly")
    func settableWeakDelegate() async throws {
        let peer = try await PythonPeer.start(scriptPath: aioScript())
        defer { Task { await peer.stop() } }
        let connection = HubConnectionBuilder(url: URL(string: "http://127.0.0.1:\(peer.port)/hub")!)
            .withHubConnectionOptions { $0.callbackQueue = callbackQueue() }
            .build()
        var first: RecordingDelegate? = RecordingDelegate()
        connection.delegate = first
        #expect(connection.delegate === first)
        weak let gone = first
        first = nil
        #expect(gone == nil && connection.delegate == nil, "the connection does not keep its delegate alive")
        let second = RecordingDelegate()
        connection.delegate = second
        viewDidLoad { connection.start() }
        #expect(try await second.events.wait(count: 1) == ["open@queue"])
        #expect(connection.connectionId != nil)
        viewDidLoad { connection.stop() }
        #expect(try await second.events.wait(count: 2).last == "close(nil)@queue")
        #expect(connection.connectionId == nil)
    }

    @Test("The official client's API: async handlers in order, client results, streams, cancel, state, onClosed")
    func officialClient() async throws {
        let peer = try await PythonPeer.start(scriptPath: aioScript())
        defer { Task { await peer.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: "http://127.0.0.1:\(peer.port)/hub").build()
        // The official client's users write `await` on these (its HubConnection is an actor); here
        // they are synchronous, and `await` would only draw a warning.
        let received = Recorder<String>()
        connection.on("receive") { (user: String, count: Int) in received.append("\(user):\(count)") }
        // Names match case-sensitively, as in the official client.
        connection.on("RECEIVE") { (user: String, count: Int) in received.append("RECEIVE \(user):\(count)") }
        connection.on("getValue") { (argument: String) in "client got \(argument)" }
        let closed = Recorder<String>()
        connection.onClosed { error in closed.append(error == nil ? "nil" : "error") }
        #expect(connection.state() == .Stopped)
        try await connection.start()
        #expect(connection.state() == .Connected)
        let error = await #expect(throws: SignalRError.self) { try await connection.start() }
        if case .invalidOperation? = error {} else { Issue.record("a second start: \(String(describing: error))") }

        for count in 1...5 { try await connection.send(method: "broadcast", arguments: "zoe", count) }
        #expect(try await received.wait(count: 5) == (1...5).map { "zoe:\($0)" })
        let sum: Int = try await connection.invoke(method: "add", arguments: 40, 2)
        #expect(sum == 42)
        let failure = await #expect(throws: SignalRError.self) { try await connection.invoke(method: "fail", arguments: "bad input") }
        #expect(failure == .invocationError("bad input"))
        let answer: String = try await connection.invoke(method: "askClient", arguments: "getValue", "x")
        #expect(answer == "client got x")

        let stream: any StreamResult<Int> = try await connection.stream(method: "countTo", arguments: 3)
        var items: [Int] = []
        for try await item in stream.stream { items.append(item) }
        #expect(items == [1, 2, 3])

        let forever: any StreamResult<Int> = try await connection.stream(method: "countForever")
        var seen = 0
        let ended = await #expect(throws: SignalRError.self) {
            for try await _ in forever.stream {
                seen += 1
                if seen == 2 { await forever.cancel() }
            }
        }
        #expect(ended == .streamCancelled)

        let (upload, continuation) = AsyncStream.makeStream(of: Int.self)
        for number in 1...5 { continuation.yield(number) }
        continuation.finish()
        let collected: [Int] = try await connection.invoke(method: "collect", arguments: upload)
        #expect(collected == [1, 2, 3, 4, 5])

        await connection.stop()
        #expect(try await closed.wait(count: 1) == ["nil"])
        #expect(connection.state() == .Stopped)
    }

    @Test("The official client's onReconnecting runs before every reconnect attempt, then onReconnected")
    func onReconnectingBeforeEachAttempt() async throws {
        let peer = try await PythonPeer.start(scriptPath: aioScript())
        defer { Task { await peer.stop() } }
        let proxy = try await FaultProxy.start(targetPort: peer.port)
        defer { Task { await proxy.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: proxy.url(scheme: "http") + "/hub", transport: .webSockets)
            .withAutomaticReconnect(retryDelays: [0, 0.3, 0.3, 0.3, 0.3, 0.3]).build()
        let events = Recorder<String>()
        connection.onReconnecting { error in events.append(error == nil ? "reconnecting nil" : "reconnecting") }
        connection.onReconnected { events.append("reconnected") }
        try await connection.start()
        await proxy.refuseConnections(for: .milliseconds(800))
        proxy.cutAll(.reset)
        try await waitUntil("reconnected", limit: .seconds(20)) { events.values.last == "reconnected" }
        let seen = events.values
        #expect(seen.filter { $0 == "reconnecting" }.count >= 2, "one per attempt: \(seen)")
        #expect(!seen.contains("reconnecting nil"))
        #expect(connection.state() == .Connected)
        await connection.stop()
    }

    @Test("HubConnection(connection: HttpConnection(url:), hubProtocol:) connects to the connection's URL; another Connection type fails to open")
    func hubConnectionOverHttpConnection() async throws {
        let peer = try await PythonPeer.start(scriptPath: aioScript())
        defer { Task { await peer.stop() } }
        let options = HttpConnectionOptions()
        options.headers = ["X-App": "1"]
        let hubOptions = HubConnectionOptions()
        hubOptions.callbackQueue = callbackQueue()
        let connection = HubConnection(
            connection: HttpConnection(url: URL(string: "http://127.0.0.1:\(peer.port)/hub")!, options: options),
            hubProtocol: JSONHubProtocol(logger: NullLogger()), hubConnectionOptions: hubOptions)
        let delegate = RecordingDelegate()
        connection.delegate = delegate
        viewDidLoad { connection.start() }
        #expect(try await delegate.events.wait(count: 1) == ["open@queue"])
        viewDidLoad { connection.stop() }
        #expect(try await delegate.events.wait(count: 2).last == "close(nil)@queue")

        final class OtherConnection: Connection {
            var delegate: (any ConnectionDelegate)?
            var inherentKeepAlive: Bool { false }
            var connectionId: String? { nil }
            func start() {}
            func send(data: Data, sendDidComplete: @escaping ((any Error)?) -> Void) {}
            func stop(stopError: (any Error)?) {}
        }
        let other = HubConnection(connection: OtherConnection(), hubProtocol: JSONHubProtocol(logger: NullLogger()), hubConnectionOptions: hubOptions)
        let refused = RecordingDelegate()
        other.delegate = refused
        viewDidLoad { other.start() }
        #expect(try await refused.events.wait(count: 1) == ["failToOpen@queue"])
    }

    @Test("JSONHubProtocol reads and writes SwiftSignalRClient's message classes")
    func jsonHubProtocol() throws {
        let hubProtocol = JSONHubProtocol(logger: NullLogger())
        let input = Data("{\"type\":1,\"target\":\"receive\",\"arguments\":[\"zoe\",3]}\u{1e}{\"type\":3,\"invocationId\":\"7\",\"result\":42}\u{1e}{\"type\":6}\u{1e}".utf8)
        let messages = try hubProtocol.parseMessages(input: input)
        #expect(messages.map(\.type) == [.Invocation, .Completion, .Ping])
        let invocation = try #require(messages[0] as? ClientInvocationMessage)
        #expect(invocation.target == "receive")
        #expect(try invocation.getArgument(type: String.self) == "zoe")
        #expect(try invocation.getArgument(type: Int.self) == 3)
        let completion = try #require(messages[1] as? CompletionMessage)
        #expect(completion.invocationId == "7" && completion.hasResult && completion.error == nil)
        #expect(try completion.getResult(Int.self) == 42)
        let written = try hubProtocol.writeMessage(message: StreamItemMessage(invocationId: "2", item: "x"))
        #expect(written.last == 0x1E)
        let object = try JSONSerialization.jsonObject(with: written.dropLast()) as? [String: Any]
        #expect(object?["type"] as? Int == 2 && object?["invocationId"] as? String == "2" && object?["item"] as? String == "x")
    }
}

/// A value behind a lock, for the tests' flags.
final class Locked<Value: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: every access goes through `lock`.
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
