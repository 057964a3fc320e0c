import Dispatch
import Foundation
import IKEventSource
import NIOCore
import RealtimeCore
import RealtimeTesting
import Testing

// IKEventSource 3.0.1's behaviour, against sse-starlette (Tests/EventSourceClientTests/Peers/ik_peer.py):
// the ready state, connect() again from onComplete, which callback an event goes to, the
// Last-Event-Id of a reconnection, onComplete's values, and the queue the callbacks run on.
// The sources are given a queue of the test's own, but for the test of the default (the main queue,
// which this process runs: its async main drains it, on a thread that is not the main thread).

/// One line per callback, in the order the callback queue ran them.
typealias Log = Recorder<String>

private func ikPeerScript() -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("EventSourceClientTests/Peers/ik_peer.py").path
}

/// A serial queue that can tell whether the current code runs on it.
private final class CallbackQueue: Sendable {
    let queue = DispatchQueue(label: "ik-callbacks")
    private let key = DispatchSpecificKey<Int>()

    init() { queue.setSpecific(key: key, value: 1) }

    var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == 1 }
}

private func describe(_ status: Int?, _ reconnect: Bool?, _ error: NSError?) -> String {
    let errorText = error.map { "\($0.domain) \($0.code)" } ?? "nil"
    return "complete \(status.map(String.init) ?? "nil") \(reconnect.map(String.init) ?? "nil") \(errorText)"
}

@Suite(.serialized, .timeLimit(.minutes(1))) struct IKEventSourceBehaviourTests {
    @Test func readyStateIsClosedUntilConnectThenConnectingOpenAndClosedAfterDisconnect() async throws {
        // Started and stopped off the concurrency pool (PythonPeer waits on a thread of its own).
        let peer = try await PythonPeer.start(scriptPath: ikPeerScript())
        defer { Task { await peer.stop() } }
        let queue = CallbackQueue()
        let log = Log()
        let source = EventSource(url: URL(string: "http://127.0.0.1:\(peer.port)/hold")!, callbackQueue: queue.queue)
        #expect(source.readyState == .closed, "IKEventSource: .closed from init until connect()")
        // The default queue is the main queue: the same dispatch queue (on Linux each
        // `DispatchQueue.main` is a new wrapper of it, so the wrappers' identity cannot tell).
        let mainKey = DispatchSpecificKey<Int>()
        DispatchQueue.main.setSpecific(key: mainKey, value: 7)
        #expect(EventSource(url: source.url).callbackQueue.getSpecific(key: mainKey) == 7, "the default queue is the main queue")
        DispatchQueue.main.setSpecific(key: mainKey, value: nil)
        source.onOpen { [unowned source] in log.append("open \(source.readyState)") }
        source.onMessage { [unowned source] id, _, data in log.append("message \(id ?? "nil") \(data ?? "nil") \(source.readyState)") }
        source.onComplete { [unowned source] status, reconnect, error in
            log.append(describe(status, reconnect, error) + " \(source.readyState)")
        }
        source.connect()
        #expect(source.readyState == .connecting, "set inside connect()")
        #expect(await log.wait(for: 2) == ["open open", "message 1 first open"])
        #expect(source.readyState == .open)
        source.disconnect()
        #expect(source.readyState == .closed, "set inside disconnect()")
        // After a response, the end of the cancelled connection reports its status and no error.
        #expect(await log.wait(for: 3).last == "complete 200 false nil closed")
    }

    @Test func connectAgainFromOnCompleteReconnectsSendingTheLastEventId() async throws {
        // Started and stopped off the concurrency pool (PythonPeer waits on a thread of its own).
        let peer = try await PythonPeer.start(scriptPath: ikPeerScript())
        defer { Task { await peer.stop() } }
        let queue = CallbackQueue()
        let log = Log()
        let source = EventSource(url: URL(string: "http://127.0.0.1:\(peer.port)/story")!, callbackQueue: queue.queue)
        var completions = 0
        // IKEventSource's documented way: the app reconnects from onComplete, passing the ID it kept.
        source.onComplete { [unowned source] status, reconnect, error in
            completions += 1
            log.append(describe(status, reconnect, error) + " \(source.readyState) \(source.lastEventId ?? "nil")")
            if completions == 1 { source.connect(lastEventId: source.lastEventId) }
        }
        source.connect()
        let seen = await log.wait(for: 2)
        // The server ended each response: status 200, IKEventSource's advice false, no error;
        // readyState stays .open (IKEventSource never changes it at the end of a connection).
        #expect(seen == ["complete 200 false nil open 3", "complete 200 false nil open 3"])
        let (_, body) = try await HTTPTransport.execute(HTTPRequestSpec(url: "http://127.0.0.1:\(peer.port)/seen"))
        #expect(String(buffer: body) == "none,3", "the second request sent Last-Event-Id: 3; the first none")
        source.disconnect()
    }

    /// IKEventSource opened a second stream and kept the first; here the first is closed, and its
    /// end is not reported (the app asked for the new connection).
    @Test func connectWhileOpenReplacesTheConnection() async throws {
        // Started and stopped off the concurrency pool (PythonPeer waits on a thread of its own).
        let peer = try await PythonPeer.start(scriptPath: ikPeerScript())
        defer { Task { await peer.stop() } }
        let queue = CallbackQueue()
        let log = Log()
        let source = EventSource(url: URL(string: "http://127.0.0.1:\(peer.port)/hold")!, callbackQueue: queue.queue)
        source.onOpen { log.append("open") }
        source.onMessage { id, _, data in log.append("message \(id ?? "nil") \(data ?? "nil")") }
        source.onComplete { status, reconnect, error in log.append(describe(status, reconnect, error)) }
        source.connect()
        #expect(await log.wait(for: 2) == ["open", "message 1 first"])
        source.connect()
        #expect(await log.wait(for: 4) == ["open", "message 1 first", "open", "message 1 first"])
        source.disconnect()
        #expect(await log.wait(for: 5) == ["open", "message 1 first", "open", "message 1 first", "complete 200 false nil"])
    }

    @Test func listenersOfMessageGetOnlyAnExplicitEventMessage() async throws {
        // Started and stopped off the concurrency pool (PythonPeer waits on a thread of its own).
        let peer = try await PythonPeer.start(scriptPath: ikPeerScript())
        defer { Task { await peer.stop() } }
        let queue = CallbackQueue()
        let log = Log()
        let source = EventSource(url: URL(string: "http://127.0.0.1:\(peer.port)/story")!, callbackQueue: queue.queue)
        source.onMessage { id, event, data in log.append("onMessage \(id ?? "nil") \(event ?? "nil") \(data ?? "nil")") }
        source.addEventListener("message") { id, event, data in log.append("listener \(id ?? "nil") \(event ?? "nil") \(data ?? "nil")") }
        source.addEventListener("user-connected") { id, event, data in log.append("listener \(id ?? "nil") \(event ?? "nil") \(data ?? "nil")") }
        source.onComplete { _, _, _ in log.append("complete") }
        #expect(source.events() == ["message", "user-connected"])
        source.connect()
        #expect(await log.wait(for: 5) == [
            "onMessage 1 message explicit",
            "listener 1 message explicit",  // `event: message` given: onMessage, then the listener
            "onMessage 2 message unnamed",  // no event name: onMessage only
            "listener 3 user-connected named",
            "complete",
        ])
        source.removeEventListener("message")
        #expect(source.events() == ["user-connected"])
        source.disconnect()
    }

    /// IKEventSource's `shouldReconnect`: false for 200, true for the other 2xx (so a 204 gives
    /// true), false for the rest; with no response, nil and the URLSession error.
    @Test func onCompleteValuesForAServerCloseA204AndARefusedConnection() async throws {
        // Started and stopped off the concurrency pool (PythonPeer waits on a thread of its own).
        let peer = try await PythonPeer.start(scriptPath: ikPeerScript())
        defer { Task { await peer.stop() } }
        let queue = CallbackQueue()
        let refusing = try RefusingPort()
        defer { refusing.release() }
        var results: [String] = []
        for path in ["http://127.0.0.1:\(peer.port)/story", "http://127.0.0.1:\(peer.port)/empty", "http://127.0.0.1:\(refusing.port)/sse"] {
            let log = Log()
            let source = EventSource(url: URL(string: path)!, callbackQueue: queue.queue)
            source.onOpen { log.append("open") }
            source.onComplete { [unowned source] status, reconnect, error in
                log.append(describe(status, reconnect, error) + " \(source.readyState)")
            }
            source.connect()
            let seen = await log.wait(for: path.hasSuffix("/sse") ? 1 : 2)
            results.append(seen.joined(separator: ", "))
            source.disconnect()
        }
        #expect(results == [
            "open, complete 200 false nil open",
            "open, complete 204 true nil open",  // IKEventSource opens on any response head
            "complete nil nil \(NSURLErrorDomain) \(NSURLErrorCannotConnectToHost) connecting",
        ])
    }

    /// The default queue: the main queue (this test process runs it: its async main drains the
    /// main queue), where the main actor's code may run, as IKEventSource's callbacks could touch UI.
    @Test func byDefaultCallbacksRunOnTheMainQueueWhereTheMainActorIs() async throws {
        // Started and stopped off the concurrency pool (PythonPeer waits on a thread of its own).
        let peer = try await PythonPeer.start(scriptPath: ikPeerScript())
        defer { Task { await peer.stop() } }
        let mainKey = DispatchSpecificKey<Int>()
        DispatchQueue.main.setSpecific(key: mainKey, value: 7)
        defer { DispatchQueue.main.setSpecific(key: mainKey, value: nil) }
        let log = Log()
        let source = EventSource(url: URL(string: "http://127.0.0.1:\(peer.port)/hold")!)
        source.onOpen { log.append("open on main \(DispatchQueue.getSpecific(key: mainKey) == 7)") }
        source.onMessage { _, _, data in
            // What a Swift 6 app whose handler updates main-actor state writes.
            let text = MainActor.assumeIsolated { "message \(data ?? "nil") on the main actor" }
            log.append(text)
        }
        source.connect()
        #expect(await log.wait(for: 2) == ["open on main true", "message first on the main actor"])
        source.disconnect()
    }

    @Test func callbacksRunOnTheSourcesQueueNeverInsideTheCallersCall() async throws {
        // Started and stopped off the concurrency pool (PythonPeer waits on a thread of its own).
        let peer = try await PythonPeer.start(scriptPath: ikPeerScript())
        defer { Task { await peer.stop() } }
        let queue = CallbackQueue()
        let log = Log()
        let source = EventSource(url: URL(string: "http://127.0.0.1:\(peer.port)/hold")!, callbackQueue: queue.queue)
        source.onOpen { log.append("open on queue \(queue.isCurrent)") }
        source.onMessage { _, _, _ in log.append("message on queue \(queue.isCurrent)") }
        source.onComplete { _, _, _ in log.append("complete on queue \(queue.isCurrent)") }
        source.connect()
        #expect(await log.wait(for: 2) == ["open on queue true", "message on queue true"])
        // disconnect() called on the callback queue itself: a callback run inside the call would
        // come before "returned"; queued, it comes after.
        queue.queue.sync {
            source.disconnect()
            log.append("returned")
        }
        #expect(await log.wait(for: 4).suffix(2) == ["returned", "complete on queue true"])
    }
}
