// swift-tools-version: 6.1

import PackageDescription

let package = Package(
    name: "swift-realtime-benchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "swift-realtime", path: "../"),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/hummingbird-project/swift-websocket.git", from: "1.6.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
    ],
    targets: [
        .executableTarget(
            name: "CoreBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "RealtimeCore", package: "swift-realtime"),
                .product(name: "EventSourceClient", package: "swift-realtime"),
                .product(name: "RealtimeTesting", package: "swift-realtime"),
                .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/CoreBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "SocketIOBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "RealtimeCore", package: "swift-realtime"),
                .product(name: "SocketIOEngine", package: "swift-realtime"),
                .product(name: "RealtimeTesting", package: "swift-realtime"),
            ],
            path: "Benchmarks/SocketIOBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "SignalRBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "RealtimeCore", package: "swift-realtime"),
                .product(name: "SignalRHub", package: "swift-realtime"),
                .product(name: "RealtimeTesting", package: "swift-realtime"),
            ],
            path: "Benchmarks/SignalRBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "SpreadbotBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "RealtimeCore", package: "swift-realtime"),
                .product(name: "SpreadbotClient", package: "swift-realtime"),
                .product(name: "RealtimeTesting", package: "swift-realtime"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Benchmarks/SpreadbotBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "SignalRCompare",
            dependencies: [
                .product(name: "RealtimeCore", package: "swift-realtime"),
                .product(name: "SignalRHub", package: "swift-realtime"),
                .product(name: "RealtimeTesting", package: "swift-realtime"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Sources/SignalRCompare"
        ),
        .executableTarget(
            name: "WebSocketCompare",
            dependencies: [
                .product(name: "RealtimeCore", package: "swift-realtime"),
                .product(name: "RealtimeTesting", package: "swift-realtime"),
                .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/WebSocketCompare"
        ),
        .target(
            name: "EngineWorkloads",
            dependencies: [
                .product(name: "RealtimeCore", package: "swift-realtime"),
                .product(name: "EventSourceClient", package: "swift-realtime"),
                .product(name: "IKEventSource", package: "swift-realtime"),
                .product(name: "SocketIOEngine", package: "swift-realtime"),
                .product(name: "SignalRHub", package: "swift-realtime"),
                .product(name: "SpreadbotClient", package: "swift-realtime"),
                .product(name: "RealtimeTesting", package: "swift-realtime"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            path: "Sources/EngineWorkloads"
        ),
        .executableTarget(name: "EngineCompare", dependencies: ["EngineWorkloads"], path: "Sources/EngineCompare"),
        .executableTarget(name: "EngineCompareSync", dependencies: ["EngineWorkloads"], path: "Sources/EngineCompareSync"),
        .executableTarget(
            name: "SocketIOCompare",
            dependencies: [
                .product(name: "RealtimeCore", package: "swift-realtime"),
                .product(name: "SocketIOEngine", package: "swift-realtime"),
                .product(name: "RealtimeTesting", package: "swift-realtime"),
            ],
            path: "Sources/SocketIOCompare"
        ),
    ]
)
