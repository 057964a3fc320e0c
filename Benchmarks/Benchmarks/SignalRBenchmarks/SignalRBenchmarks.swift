import Benchmark
import Foundation
import RealtimeCore
import RealtimeTesting
import SignalRHub

/// One connected client per protocol and server, made on first use: the in-process
/// SignalRTestServer, or aiosignalr in its own process (so malloc counts are the client's alone).
actor Connections {
    static let shared = Connections()
    private var connections: [String: HubConnection] = [:]
    private var servers: [SignalRTestServer] = []
    private var peers: [PythonPeer] = []

    func connection(_ kind: HubProtocolType, python: Bool) async throws -> HubConnection {
        let key = "\(kind.rawValue)-\(python)"
        if let existing = connections[key] { return existing }
        let url: String
        if python {
            // Needs REALTIME_PYTHON with the pinned peers (Scripts/test.sh makes ../.venv).
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("Tests/SignalRHubTests/Peers/aiosignalr_server.py").path
            let peer = try await PythonPeer.start(scriptPath: script)
            peers.append(peer)
            url = "http://127.0.0.1:\(peer.port)/hub"
        } else {
            let server = try await SignalRTestServer.start()
            servers.append(server)
            url = server.url
        }
        let connection = HubConnectionBuilder().withUrl(url: url, transport: .webSockets).withHubProtocol(hubProtocol: kind).build()
        try await connection.start()
        connections[key] = connection
        return connection
    }
}

let invocation = HubMessage.invocation(HubInvocation(
    invocationId: "123", target: "SendMessage",
    arguments: ["ada", "hello there", 42, ["tags": ["a", "b"], "score": 9.5, "ok": true]]))
let completion = HubMessage.completion(HubCompletion(invocationId: "123", outcome: .result(["id": 7, "name": "a result", "values": [1, 2, 3]])))

struct TypedArgument: Codable {
    struct Owner: Codable { var name: String; var tags: [String] }
    var id: Int
    var name: String
    var score: Double
    var ok: Bool
    var values: [Int]
    var owner: Owner
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal], warmupIterations: 10,
        maxDuration: .seconds(5), maxIterations: 1_000_000)

    // MARK: Codecs: one message encoded or decoded per iteration (1,000 per iteration for throughput)

    for kind in HubProtocolType.allCases {
        let codec = HubProtocolCodec(kind)
        for (name, message) in [("invocation", invocation), ("completion", completion)] {
            Benchmark("\(kind.rawValue): encode 1,000 \(name) messages") { benchmark in
                for _ in benchmark.scaledIterations {
                    var out: [UInt8] = []
                    out.reserveCapacity(64 * 1024)
                    for _ in 0..<1_000 { codec.write(message, into: &out) }
                    blackHole(out)
                }
            }
            let framed = Array((0..<1_000).map { _ in codec.encode(message) }.joined())
            Benchmark("\(kind.rawValue): decode 1,000 \(name) messages (\(framed.count / 1_000) bytes each)") { benchmark in
                for _ in benchmark.scaledIterations {
                    var framer = HubMessageFramer(kind)
                    var count = 0
                    try framer.consume(framed) { (body) throws(HubProtocolError) in
                        blackHole(try codec.decode(body: body))
                        count += 1
                    }
                    precondition(count == 1_000)
                }
            }
        }
    }

    // MARK: Typed arguments: a struct argument decoded from its JSONValue, both ways side by side

    let typedArgument: JSONValue = ["id": 7, "name": "a result", "score": 9.5, "ok": true, "values": [1, 2, 3],
                                    "owner": ["name": "ada", "tags": ["a", "b"]]]
    Benchmark("typed argument: decode 1,000 structs (HubValueCoding, from the value)") { benchmark in
        for _ in benchmark.scaledIterations {
            for _ in 0..<1_000 { blackHole(try HubValueCoding.decode(typedArgument, as: TypedArgument.self)) }
        }
    }
    Benchmark("typed argument: decode 1,000 structs (JSON text + JSONDecoder, the way before)") { benchmark in
        for _ in benchmark.scaledIterations {
            for _ in 0..<1_000 {
                blackHole(try JSONDecoder().decode(TypedArgument.self, from: Data(typedArgument.jsonString.utf8)))
            }
        }
    }

    // Encoding the same struct: straight into the value, and the way before (JSONEncoder's text read
    // back; the JSONValue.init(encoding:) that HubValueCoding used).
    let typedValue = try! HubValueCoding.decode(typedArgument, as: TypedArgument.self)
    Benchmark("typed argument: encode 1,000 structs (HubValueCoding, into the value)") { benchmark in
        for _ in benchmark.scaledIterations {
            for _ in 0..<1_000 { blackHole(try HubValueCoding.encode(typedValue)) }
        }
    }
    Benchmark("typed argument: encode 1,000 structs (JSONEncoder text + read back, the way before)") { benchmark in
        for _ in benchmark.scaledIterations {
            for _ in 0..<1_000 { blackHole(try JSONValue(encoding: typedValue)) }
        }
    }

    // MARK: Invocations over WebSockets

    for python in [false, true] {
        let server = python ? "aiosignalr" : "in-process server"
        for kind in HubProtocolType.allCases {
            Benchmark("invoke round trip, sequential, \(kind.rawValue), \(server)", configuration: .init(maxDuration: .seconds(3))) { benchmark in
                let connection = try await Connections.shared.connection(kind, python: python)
                benchmark.startMeasurement()
                for index in benchmark.scaledIterations {
                    let value: Int = try await connection.invoke(method: "echo", arguments: index)
                    blackHole(value)
                }
            }
            Benchmark("1,000 invocations in flight, \(kind.rawValue), \(server)", configuration: .init(maxDuration: .seconds(5))) { benchmark in
                let connection = try await Connections.shared.connection(kind, python: python)
                benchmark.startMeasurement()
                for _ in benchmark.scaledIterations {
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        for index in 0..<1_000 {
                            group.addTask { let _: Int = try await connection.invoke(method: "echo", arguments: index) }
                        }
                        try await group.waitForAll()
                    }
                }
            }
        }
    }
}
